"""The remote side of ``--launcher ssh``: ``python -m gluondist.launcher.child.remote`` runs one
process of a job on its host and ends its whole process tree when the launcher is gone.

Protocol (version ``PROTOCOL``; the launcher's preflight checks that both sides run the same
gluondist, and this side refuses a job of another protocol by name):

- stdin, first line: the job as JSON: ``protocol``, ``argv``, ``env`` (added to this host's
  environment), ``cwd``, ``worker`` (it gets an error file and its output merged into stdout),
  ``progress`` (the worker's heartbeat goes to this side's stderr, GLUONDIST_PROGRESS_FD), and
  ``silence``: seconds without a line from the launcher after which the job is ended (None:
  never). Nothing of it is quoted into a shell or shown by ``ps``.
- stdin, then: ``ping`` (the launcher's keepalive, every few seconds), ``dump`` (send the
  worker the signal that dumps its stacks) and ``resize`` (send it gluondist.elastic's
  request to stop at its next checkpoint). The end of stdin, or ``silence`` seconds without a
  line, ends the tree: SIGTERM, then SIGKILL ``proctree.STOP_GRACE`` seconds later; after a
  silence the exit status reported is ``wire.SILENCED``, so the launcher names a lost host
  even when the healed link delivers the report. A launcher
  that lost its link cannot close stdin; the silence is how a cut-off host learns it is alone.
- stdout: the process's output. stderr: the side channel, lines ``gluondist-cpu S`` (the tree's
  CPU seconds, every second, with ``progress``), ``gluondist-error JSON`` (a worker's error
  record), and last ``gluondist-exit N``: the process's exit status. An ssh session that ends
  without that line lost its connection (ssh.py tells the monitor so).

``--preflight`` prints one JSON line: this host's gluondist version, protocol and whether MXNet
can be imported, without importing it. A launcher starts each remote side with ``--tag TAG``,
its own name (a random word), so that ``--stop TAG`` can stop those that still run on this
host, as the end of their stdin would; it prints one JSON line once they are gone: how many it
stopped, how many are left. A launcher that lost a host's link uses it when the host answers
again, so the far side does not outlive the job.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from typing import List, Optional

from ... import __version__
from ... import elastic, envvars as ev, wire
from ..roles import runs_bootstrap
from . import REMOTE
from .proctree import (STACK_SIGNAL, STOP_GRACE, exit_status, holding, kill_quietly,
                       session_cpu, signal_exit, signal_tree, stop_tree)

PROTOCOL = 3  # 2: `resize`, and the exit status wire.SILENCED; 3: --tag and --stop
STOP_WAIT = STOP_GRACE + 3.0  # seconds --stop waits for the trees it stopped (SIGKILL at grace)
WATCH_TICK = 0.2  # seconds between looks at the launcher's silence (its keepalives: 3 s)
CPU_EVERY = 1.0  # seconds between the tree's CPU reports (what the stall watch samples)


def say(text: str) -> None:
    """One line on the side channel (stderr); a vanished reader is ignored."""
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


def preflight_report() -> dict:
    return {"gluondist": __version__, "protocol": PROTOCOL,
            "mxnet": importlib.util.find_spec("mxnet") is not None}


class Remote:
    """One process of a job, watched: ``start()`` then ``wait()`` (its exit status)."""

    def __init__(self, job: dict, stdin):
        self.job, self.stdin = job, stdin
        self.heard = time.monotonic()  # when the launcher last sent a line
        self.stopping = threading.Event()
        self.silenced = False  # stopped because the launcher went silent (its link is cut)
        self.child: Optional[subprocess.Popen] = None
        self.error_file: Optional[str] = None

    def start(self) -> None:
        env = {**os.environ, **self.job["env"]}
        fds = ()
        if self.job.get("worker"):
            self.error_file = os.path.join(tempfile.mkdtemp(prefix="gluondist-"), "error.json")
            env[ev.GLUONDIST_ERROR_FILE] = self.error_file
            if self.job.get("progress"):
                fds = (os.dup(2),)
                env[ev.GLUONDIST_PROGRESS_FD] = str(fds[0])
        # a bootstrap takes the request once it can; any other command never gets it
        held = holding(elastic.SIGNAL) if runs_bootstrap(self.job["argv"]) else nullcontext()
        with held:
            self.child = subprocess.Popen(
                self.job["argv"], env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                stderr=subprocess.STDOUT if self.job.get("worker") else None, pass_fds=fds)
        for fd in fds:
            os.close(fd)
        for target in (self.listen, self.watchdog) + ((self.cpu,) if fds else ()):
            threading.Thread(target=target, daemon=True).start()

    def signal_tree(self, sig: int) -> None:
        signal_tree(self.child.pid, sig)

    def stop(self, *_) -> None:
        # No child.wait() here: a signal handler interrupts the main thread's wait, which holds
        # Popen's lock. SIGTERM now, SIGKILL later; the main thread's wait then returns.
        if self.stopping.is_set():
            return
        self.stopping.set()
        stop_tree(self.child.pid)

    def listen(self) -> None:
        for line in iter(self.stdin.readline, b""):
            self.heard = time.monotonic()
            asked = {b"dump": STACK_SIGNAL, b"resize": elastic.SIGNAL}.get(line.strip())
            if asked is not None:
                try:
                    os.kill(self.child.pid, asked)
                except OSError:
                    pass
        self.stop()  # the launcher stopped, died, or its ssh ended

    def watchdog(self) -> None:
        silence = self.job.get("silence")
        while silence is not None and self.child.poll() is None and not self.stopping.is_set():
            quiet = time.monotonic() - self.heard
            if quiet > silence:
                say(f"gluondist: no word from the launcher for {quiet:.0f}s: stopping the job "
                    "on this host")
                self.silenced = True
                self.stop()
                return
            time.sleep(WATCH_TICK)

    def cpu(self) -> None:
        while self.child.poll() is None:
            total = session_cpu(self.child.pid)
            if total is not None:
                say(wire.encode(wire.Cpu(total)))
            time.sleep(CPU_EVERY)

    def wait(self) -> int:
        code = self.child.wait()
        self.signal_tree(signal.SIGKILL)  # whatever the command left behind
        if self.error_file:
            # relayed even after a stop: a worker that failed on its own and was stopped in its
            # exit grace must still come first in the report, by its record's time
            try:
                with open(self.error_file) as f:
                    record = json.load(f)
                if isinstance(record, dict):
                    say(wire.encode(wire.Error(record)))
            except (OSError, ValueError):
                pass
            shutil.rmtree(os.path.dirname(self.error_file), ignore_errors=True)
        if self.silenced:  # the launcher reads this as a lost host, however late it arrives
            return wire.SILENCED
        return signal_exit(signal.SIGTERM) if self.stopping.is_set() else exit_status(code)


def _tagged(tag: str) -> List[int]:
    """The pids of this user's remote sides started as ``PYTHON -m REMOTE --tag tag``, exactly
    (not a process whose arguments merely end so)."""
    want = ["-m", REMOTE, "--tag", tag, ""]  # the NUL after the last argument
    pids = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == os.getuid():
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read().decode(errors="replace").split("\0")[1:] == want:
                        pids.append(int(name))
        except OSError:  # gone meanwhile
            pass
    return pids


def stop_tagged(tag: str, wait: float = STOP_WAIT) -> dict:
    """SIGTERM to every remote side of ``tag`` on this host (each stops its tree, as at the end
    of its stdin), then wait up to ``wait`` seconds for them to be gone."""
    pids = _tagged(tag)
    for pid in pids:
        kill_quietly(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while set(pids) & set(_tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"stopped": len(pids), "left": len(set(pids) & set(_tagged(tag)))}


def run(job: dict, stdin) -> int:
    """Run ``job`` (see the module's docstring), listening on ``stdin`` (unbuffered), and
    return its exit status."""
    if job.get("protocol") != PROTOCOL:
        print(f"gluondist: this host runs gluondist {__version__} (protocol {PROTOCOL}); the "
              f"launcher sent protocol {job.get('protocol')!r}: install the launcher's "
              "gluondist version here", flush=True)
        return 2
    try:
        os.chdir(job["cwd"])
    except OSError as exc:
        print(f"gluondist: cannot enter {job['cwd']} on this host: {exc.strerror}", flush=True)
        return 2
    remote = Remote(job, stdin)
    signal.signal(signal.SIGTERM, remote.stop)
    signal.signal(signal.SIGHUP, remote.stop)
    remote.start()
    return remote.wait()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--preflight"]:
        print(json.dumps(preflight_report()), flush=True)
        return 0
    tagged = len(argv) == 2 and argv[0] in ("--stop", "--tag") and argv[1].isalnum()
    if tagged and argv[0] == "--stop":
        print(json.dumps(stop_tagged(argv[1])), flush=True)
        return 0
    if argv and not tagged:
        print(f"usage: python -m {REMOTE} [--preflight | --tag TAG | --stop TAG] (with --tag "
              "or nothing, the job as JSON on stdin)", file=sys.stderr)
        return 2
    # stdin unbuffered: a thread blocked in a buffered readline holds the buffer's lock, and
    # the interpreter aborts when it finds that lock taken at exit; and nothing is read ahead.
    stdin = open(0, "rb", buffering=0, closefd=False)
    try:
        job = json.loads(stdin.readline())
    except ValueError:
        job = None
    if not isinstance(job, dict):
        print("gluondist: expected the job as one JSON line on stdin", flush=True)
        code = 2
    else:
        code = run(job, stdin)
    say(wire.encode(wire.Exit(code)))
    return code


if __name__ == "__main__":
    sys.exit(main())
