"""Start, watch and stop the processes of a plan, like torchrun's PContext.

Each child runs in its own session (process group), so one ``killpg`` takes its whole tree and
a Ctrl-C at the terminal reaches only the launcher. A small reaper process (child/reaper.py) holds
the other end of a pipe from the launcher: if the launcher dies, even by SIGKILL, the pipe
closes and the reaper kills every group it was told about.

A worker can also have a side channel of gluondist.wire messages: its progress (from
gluondist.heartbeat) and, over ssh, its tree's CPU time, its error record and its exit status
(from the remote side). Locally it is a pipe whose write end the worker inherits; over ssh it
is the session's stderr, which every role has.
"""
from __future__ import annotations

import collections
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Sequence, Tuple

from .. import envvars as ev, wire
from . import child
from .child import errorfile
from .child.proctree import STOP_GRACE, process_state, session_pids, signal_tree
from .errors import LaunchError
from .outcome import ProcessEnd, Teardown, Unreaped
from .plan import ProcessSpec
from .pslite import is_pslite_chatter
from .roles import runs_bootstrap
from .transports import Backend, Transport
from .transports.local import LocalTransport

TAIL_LINES = 40  # a failed process's last lines kept for the report: its traceback, whole
REAP_WAIT = 5.0  # how long the teardown waits for the processes to die after SIGKILL
WAIT_TICK = 0.02  # seconds between looks at a start or teardown that must not be cut short
READER_WAIT = 2.0  # at most this long for a reaped process's last output lines to be read
log = logging.getLogger(__name__)


def added_at_start(spec: ProcessSpec, backend: Backend, progress: bool) -> dict:
    """What a process gets on top of its spec's environment when it is started, as
    descriptions (the values exist only then): a worker's error file and progress pipe."""
    added = {}
    if spec.role == "worker" and backend.error_file_home:
        added[ev.GLUONDIST_ERROR_FILE] = \
            f"<a file in {backend.error_file_home} temporary directory>"
    if spec.role == "worker" and progress:
        added[ev.GLUONDIST_PROGRESS_FD] = "<a pipe's write end, for the heartbeats>"
    return added


@dataclass
class Exited:
    spec: ProcessSpec
    returncode: int  # negative: killed by that signal (Popen's convention)
    when: float
    wall: float = 0.0  # time.time() when noticed


class Child:
    def __init__(self, spec: ProcessSpec, proc: subprocess.Popen, on_line, log_file,
                 side=None, error_file: Optional[str] = None):
        self.spec, self.proc = spec, proc
        self.tail: Deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.exited: Optional[Exited] = None
        self.batches: Optional[int] = None  # from its heartbeat, once it sent one
        self.batches_at = 0.0  # time.monotonic() when that count last grew
        self.cpu: Optional[float] = None  # its tree's CPU seconds, as the ssh remote side reports
        self.error: Optional[dict] = None  # its error record (see errorfile.py)
        self.exit_report: Optional[int] = None  # its exit status as the ssh remote side saw it
        self.error_file = error_file
        self.captured: Optional[List[str]] = None  # lines held back from the console
        self.last_output = time.monotonic()
        self._on_line, self._log = on_line, log_file
        self._warned = False
        self._lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, args=(proc.stdout, False),
                                       name=f"read {spec.label}", daemon=True)
        self.reader.start()
        self.side_reader = None
        if side is not None:
            self.side_reader = threading.Thread(target=self._read, args=(side, True),
                                                name=f"side {spec.label}", daemon=True)
            self.side_reader.start()

    def _read(self, stream, side: bool) -> None:
        # Whole lines as bytes, decoded one by one: a UTF-8 character split across reads can
        # never reach the decoder in halves. On the side channel, what is not ours (ssh's own
        # messages) is output like the rest; on stdout nothing is taken for ours.
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            message = wire.decode(line) if side else None
            if message is not None:
                self._side(message)
                continue
            with self._lock:  # two readers (output, side channel) share the log and the tail
                self._output(raw, line)
        stream.close()

    def _output(self, raw: bytes, line: str) -> None:
        if self._log is not None:
            try:
                self._log.write(raw if raw.endswith(b"\n") else raw + b"\n")
                self._log.flush()
            except (OSError, ValueError):  # a full disk, or closed by the teardown of a
                pass  # process that would not die: the console and the tail still get it
        self.tail.append(line)
        self.last_output = time.monotonic()
        if self.captured is not None:
            self.captured.append(line)
        elif self._on_line is not None:
            try:
                self._on_line(self.spec, line)
            except Exception:  # noqa: BLE001  keep draining the pipe whatever happened, or
                if not self._warned:  # the child would block writing to it
                    self._warned = True
                    log.warning("showing a line of %s failed; the next ones are still read",
                                self.spec.label, exc_info=True)

    def _side(self, message: wire.Message) -> None:
        if isinstance(message, wire.Progress):
            if message.batches != self.batches:
                self.batches, self.batches_at = message.batches, time.monotonic()
        elif isinstance(message, wire.Cpu):
            self.cpu = message.seconds
        elif isinstance(message, wire.Error):
            self.error = errorfile.valid(message.record)
        elif isinstance(message, wire.Exit):
            self.exit_report = message.status

    def error_record(self) -> Optional[dict]:
        if self.error is None and self.error_file:
            self.error = errorfile.read(self.error_file)
        return self.error


class ProcessGroup:
    """``start()``, then ``poll()`` repeatedly, then ``close()`` (always, in a finally)."""

    def __init__(self, specs: Sequence[ProcessSpec], on_line: Callable[[ProcessSpec, str], None],
                 log_dir: Optional[str] = None, transport: Optional[Transport] = None,
                 attempt: int = 0,
                 progress: bool = False):
        self.specs = list(specs)
        self.progress = progress  # give each worker a progress channel (stall detection)
        self.on_line = on_line
        self.log_dir = log_dir
        # the attempt's index (0 first; a restart, a grow and a port retry each add one): a
        # later attempt's logs go beside, not over, the earlier ones' (issue 36, defect 2)
        self.attempt = attempt
        self.transport = transport or LocalTransport()
        self.children: List[Child] = []
        self._reaper: Optional[subprocess.Popen] = None
        self._logs = []
        self._errors_dir: Optional[str] = None
        self.unreaped: List[Unreaped] = []  # alive after SIGKILL
        self.stopped: List[ProcessSpec] = []  # what close() had to stop

    def start(self) -> None:
        """Start the reaper and every process. An interrupt meanwhile (a KeyboardInterrupt)
        waits until every one started is recorded, so ``close()`` stops them all."""
        to_the_end(self._start)

    def _start(self) -> None:
        logs = self._open_logs()  # first: a log that cannot be written stops nothing
        self._reaper = subprocess.Popen([sys.executable, "-m", child.REAPER],
                                        stdin=subprocess.PIPE, start_new_session=True)
        self._errors_dir = tempfile.mkdtemp(prefix="gluondist-errors-")
        for spec, log in zip(self.specs, logs):
            worker = spec.role == "worker"
            error_file = os.path.join(self._errors_dir, f"{spec.log_name}.error.json") \
                if worker and self.transport.error_records else None
            proc, side = self.transport.spawn(spec, self.progress and worker, error_file)
            self._tell_reaper(f"+ {proc.pid}")
            self.children.append(Child(spec, proc, self.on_line, log, side, error_file))

    def _open_logs(self) -> list:
        """Each spec's log file (None without a log directory), all opened before any process
        starts; one that cannot be opened is a LaunchError naming it."""
        if self.log_dir is None:
            return [None] * len(self.specs)
        paths = [os.path.join(self.log_dir, s.log_name.replace(
            ".log", f".restart{self.attempt}.log") if self.attempt else s.log_name)
            for s in self.specs]
        for path in paths:  # none is truncated unless all can be written
            if os.path.isdir(path) or (os.path.exists(path) and not os.access(path, os.W_OK)):
                _unwritable(path, "a directory" if os.path.isdir(path) else "not writable")
        for path in paths:
            try:
                self._logs.append(open(path, "wb"))
            except OSError as exc:
                for log in self._logs:
                    log.close()
                self._logs = []
                _unwritable(path, exc.strerror)
        return list(self._logs)

    def poll(self) -> List[Exited]:
        """Processes that exited since the last call, in the order noticed."""
        now, wall, new = time.monotonic(), time.time(), []
        for child in self.children:
            if child.exited is None and child.proc.poll() is not None:
                child.exited = Exited(child.spec, child.proc.returncode, now, wall)
                new.append(child.exited)
        return new

    def running(self) -> List[Child]:
        return [c for c in self.children if c.exited is None]

    def request_stack(self, child: Child) -> bool:
        """Ask a worker's bootstrap to print every thread's stack; False if it has none."""
        if not runs_bootstrap(child.spec.argv) or child.exited is not None:
            return False
        self.transport.request_stack(child.proc)
        return True

    def request_resize(self) -> int:
        """Ask every running worker under the bootstrap to stop at its next checkpoint
        (gluondist.elastic); returns how many were asked."""
        asked = [c for c in self.running()
                 if c.spec.role == "worker" and runs_bootstrap(c.spec.argv)]
        for child in asked:
            self.transport.request_resize(child.proc)
        return len(asked)

    def close(self, timeout: float = STOP_GRACE) -> Teardown:
        """Stop what still runs: SIGTERM to each tree, one shared deadline, then SIGKILL.
        Returns what the teardown did (also kept in ``stopped`` and ``unreaped``, for when an
        interrupt is raised instead). Safe to call more than once. Interrupts meanwhile do
        not cut it short: the first one skips the rest of the deadline, and is raised once
        every process is stopped and every file closed."""
        hurry = threading.Event()
        to_the_end(lambda: self._close(timeout, hurry), hurry)
        return Teardown(tuple(s.label for s in self.stopped), tuple(self.unreaped))

    def ends(self) -> Tuple[ProcessEnd, ...]:
        """What each process left, once the group is closed (its side channel read to the
        end, its error file read)."""
        return tuple(ProcessEnd(
            c.spec.label, c.spec.role, c.spec.host,
            c.exited.returncode if c.exited else None, c.exited.wall if c.exited else 0.0,
            tuple(l for l in c.tail if l.strip() and not is_pslite_chatter(l)),
            c.error_record(), bool(c.exited) and self.transport.lost(c))
            for c in self.children)

    def _close(self, timeout: float, hurry: threading.Event) -> None:
        self.stopped += [c.spec for c in self.running()]  # known even if an interrupt follows
        for child in self.running():
            self.transport.stop(child.proc)  # SIGTERM to its tree, or the transport's own way
        deadline = time.monotonic() + timeout + self.transport.stop_slack
        while self.running() and time.monotonic() < deadline and not hurry.is_set():
            self.poll()
            time.sleep(WAIT_TICK)
        for child in self.children:  # leftovers, and anything the children left behind
            signal_tree(child.proc.pid, signal.SIGKILL)
        self._reap()
        for child in self.children:
            child.error_record()  # read before the files go
        if self._errors_dir is not None:
            shutil.rmtree(self._errors_dir, ignore_errors=True)
            self._errors_dir = None
        for log in self._logs:
            log.close()
        self._logs = []
        if self._reaper is not None and self._reaper.poll() is None:
            self._tell_reaper("done")
            self._reaper.stdin.close()
            if _wait(self._reaper, REAP_WAIT) is None:
                self._reaper.kill()

    def _reap(self) -> None:
        """Wait for every child, at most REAP_WAIT in all after the SIGKILL: one in
        uninterruptible sleep (state D, a hung NFS mount) cannot die, and is listed in
        ``unreaped`` as ``(label, pid, state)`` instead of hanging the launcher."""
        deadline = time.monotonic() + REAP_WAIT
        for child in self.children:
            if _wait(child.proc, deadline - time.monotonic()) is None and \
                    all(child.spec.label != u.label for u in self.unreaped):
                self.unreaped.append(Unreaped(child.spec.label, child.proc.pid,
                                              process_state(child.proc.pid)))
        # what the children left in their sessions got the SIGKILL too: see it gone
        while time.monotonic() < deadline and any(session_pids(c.proc.pid)
                                                  for c in self.children):
            time.sleep(WAIT_TICK)
        for child in self.children:
            for reader in (child.reader, child.side_reader):
                if reader is not None:
                    reader.join(timeout=max(0.0, min(READER_WAIT, deadline - time.monotonic())))
        self.poll()

    def _tell_reaper(self, message: str) -> None:
        try:
            self._reaper.stdin.write(f"{message}\n".encode())
            self._reaper.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass


def _unwritable(path: str, why: str) -> None:
    raise LaunchError(f"log file {path!r} cannot be written ({why}); remove it or give "
                      "another --log-dir")


def to_the_end(fn: Callable, hurry: Optional[threading.Event] = None):
    """``fn()``, run in a thread and waited for however many interrupts (KeyboardInterrupt)
    arrive meanwhile: Python raises them in the main thread only, so they cannot cut ``fn``
    short. The first sets ``hurry`` and is raised once ``fn`` is done (after ``fn``'s own
    error, if it raised).

    The wait polls a flag in short sleeps, never ``Thread.join``: Python 3.11's join, when an
    interrupt lands in it while the thread runs, marks the thread stopped (bpo-45274), and
    every later join returns at once, before ``fn`` is done. Python raises an interrupt at its
    next check between bytecodes, wherever that is, and ``Thread.start()`` has such checks after
    the thread exists (its wait for the thread): one landing there used to leave while ``fn``
    ran on (a teardown's processes outlived the interrupt that "stopped" them). So ``fn`` waits
    for ``go``, given from inside the ``try``, and the start is in the ``try`` too: a start cut
    short is made again, and only one of the threads runs ``fn`` (``claim``)."""
    box, done, go, claim = {}, threading.Event(), threading.Event(), threading.Lock()

    def run():
        go.wait()
        if not claim.acquire(blocking=False):
            return  # an earlier start of this call, cut short, was a thread after all
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (handed to the caller below)
            box["error"] = exc
        finally:
            done.set()
    interrupt, started = None, False
    while True:
        try:
            if not started:
                threading.Thread(target=run, name="gluondist-uninterrupted", daemon=True).start()
                started = True
            go.set()
            if interrupt is not None and hurry is not None:
                hurry.set()
            while not done.is_set():
                time.sleep(WAIT_TICK)
            break
        except BaseException as exc:  # noqa: BLE001 (raised again below)
            if isinstance(exc, RuntimeError) and not started:
                raise  # no thread to be had ("can't start new thread"): fn never ran
            interrupt = interrupt or exc
    if "error" in box:
        raise box["error"]
    if interrupt is not None:
        raise interrupt
    return box.get("value")


def _wait(proc: subprocess.Popen, timeout: float) -> Optional[int]:
    try:
        return proc.wait(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        return None
