"""Start, watch and stop the processes of a plan, like torchrun's PContext.

Each child runs in its own session (process group), so one ``killpg`` takes its whole tree and
a Ctrl-C at the terminal reaches only the launcher. A small reaper process holds the other end
of a pipe from the launcher: if the launcher dies, even by SIGKILL, the pipe closes and the
reaper kills every group it was told about.
"""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Sequence

from .plan import ProcessSpec

TAIL_LINES = 40

REAPER = r"""
import os, signal, sys
groups = set()
for line in sys.stdin:
    op, _, pgid = line.strip().partition(" ")
    if op == "done":
        sys.exit(0)
    (groups.add if op == "+" else groups.discard)(int(pgid))
for pgid in groups:  # EOF without "done": the launcher died
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


class LocalTransport:
    """Starts a spec on this machine. Tests and other transports (ssh, srun) replace it."""

    def spawn(self, spec: ProcessSpec) -> subprocess.Popen:
        return subprocess.Popen(list(spec.argv), env={**os.environ, **spec.env},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)


@dataclass
class Exited:
    spec: ProcessSpec
    returncode: int  # negative: killed by that signal (Popen's convention)
    when: float


class Child:
    def __init__(self, spec: ProcessSpec, proc: subprocess.Popen, on_line, log_file):
        self.spec, self.proc = spec, proc
        self.tail: Deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.exited: Optional[Exited] = None
        self._on_line, self._log = on_line, log_file
        self.reader = threading.Thread(target=self._read, name=f"read {spec.label}", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        # Whole lines as bytes, decoded one by one: a UTF-8 character split across reads can
        # never reach the decoder in halves.
        for raw in iter(self.proc.stdout.readline, b""):
            if self._log is not None:
                self._log.write(raw)
                self._log.flush()
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            self.tail.append(line)
            if self._on_line is not None:
                try:
                    self._on_line(self.spec, line)
                except OSError:  # the console went away (`| head`): keep draining the pipe,
                    self._on_line = None  # or the child would block writing to it
        self.proc.stdout.close()


class ProcessGroup:
    """``start()``, then ``poll()`` repeatedly, then ``close()`` (always, in a finally)."""

    def __init__(self, specs: Sequence[ProcessSpec], on_line: Callable[[ProcessSpec, str], None],
                 log_dir: Optional[str] = None, transport=None, restart: int = 0):
        self.specs = list(specs)
        self.on_line = on_line
        self.log_dir = log_dir
        self.restart = restart  # a restarted job's logs go beside, not over, the failed one's
        self.transport = transport or LocalTransport()
        self.children: List[Child] = []
        self._reaper: Optional[subprocess.Popen] = None
        self._logs = []

    def start(self) -> None:
        self._reaper = subprocess.Popen([sys.executable, "-c", REAPER], stdin=subprocess.PIPE,
                                        start_new_session=True)
        for spec in self.specs:
            log = None
            if self.log_dir is not None:
                name = spec.log_name
                if self.restart:
                    name = name.replace(".log", f".restart{self.restart}.log")
                log = open(os.path.join(self.log_dir, name), "wb")
                self._logs.append(log)
            proc = self.transport.spawn(spec)
            self._tell_reaper(f"+ {proc.pid}")
            self.children.append(Child(spec, proc, self.on_line, log))

    def poll(self) -> List[Exited]:
        """Processes that exited since the last call, in the order noticed."""
        now, new = time.monotonic(), []
        for child in self.children:
            if child.exited is None and child.proc.poll() is not None:
                child.exited = Exited(child.spec, child.proc.returncode, now)
                new.append(child.exited)
        return new

    def running(self) -> List[Child]:
        return [c for c in self.children if c.exited is None]

    def child(self, spec: ProcessSpec) -> Child:
        return next(c for c in self.children if c.spec.label == spec.label)

    def close(self, timeout: float = 5.0) -> List[ProcessSpec]:
        """Stop what still runs: SIGTERM to each tree, one shared deadline, then SIGKILL.
        Returns the specs that had to be stopped. Safe to call more than once."""
        stopped = [c.spec for c in self.running()]
        for child in self.running():
            _killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.02)
        for child in self.children:  # leftovers, and anything the children left behind
            _killpg(child.proc.pid, signal.SIGKILL)
        for child in self.children:
            child.proc.wait()
            child.reader.join(timeout=2.0)
        self.poll()
        for log in self._logs:
            log.close()
        self._logs = []
        if self._reaper is not None and self._reaper.poll() is None:
            self._tell_reaper("done")
            self._reaper.stdin.close()
            self._reaper.wait()
        return stopped

    def _tell_reaper(self, message: str) -> None:
        try:
            self._reaper.stdin.write(f"{message}\n".encode())
            self._reaper.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        name = _signal_name(-returncode)
        hint = " (often the out-of-memory killer: see `dmesg`)" if -returncode == signal.SIGKILL \
            else ""
        return f"killed by {name}{hint}"
    if 128 < returncode <= 128 + 64:  # a shell's or a remote wrapper's way to say "signal"
        return f"exit code {returncode} (128+{returncode - 128}: {_signal_name(returncode - 128)})"
    return f"exit code {returncode}"


def exit_status(returncode: int) -> int:
    """The shell's view: 128+N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
