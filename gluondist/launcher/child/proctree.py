"""A process and its tree as /proc and the kernel see them: signals to a whole session, its
CPU time, its state, and how an exit status reads. Standard library only: the launcher, the
ssh remote side, the reaper and the Kubernetes pod entry share it."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator, List, Optional

STACK_SIGNAL = signal.SIGUSR1  # what the worker bootstrap dumps its stacks on


def process_state(pid: int) -> str:
    """A process's state as /proc says it ("D (disk sleep)"), or "unknown"."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("State:")), "unknown")
    except OSError:
        return "unknown"


def killpg_quietly(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def holding(sig: int) -> Iterator[None]:
    """``sig`` held (blocked) in this thread meanwhile. A process started inside inherits it
    held, and a held signal stays pending across exec until the program unblocks it: so a
    worker started so keeps a gluondist.elastic request sent before its bootstrap installed
    the handler (the signal's default action would end it), and takes it then."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def kill_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _session_stats(sid: int):
    """``(pid, stat fields after "(comm)")`` of the live processes of session ``sid`` (a child
    started with start_new_session has sid == its pid), from /proc; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # state ppid pgrp session ...
            found.append((int(entry), fields))
    return found


def session_cpu(sid: int) -> Optional[float]:
    """CPU seconds (user + system) of the live processes of session ``sid``; None where there
    is no /proc or no such process."""
    found = _session_stats(sid)
    if not found:
        return None
    return sum(int(f[11]) + int(f[12]) for _, f in found) / _TICK  # utime stime


def session_pids(sid: int) -> List[int]:
    """Live (not zombie) pids of session ``sid``, its process groups included, from /proc."""
    return [pid for pid, fields in _session_stats(sid) or () if fields[0] != b"Z"]


def signal_tree(pid: int, sig: int) -> None:
    """``sig`` to a child's process group and to every process of its session: a
    grandchild that made a group of its own (setpgid, a shell's job control) is still
    reached; only one that started a session of its own leaves."""
    killpg_quietly(pid, sig)
    for member in session_pids(pid):
        kill_quietly(member, sig)


# A stopped tree's grace: SIGTERM, then SIGKILL this much later. MXNet's exit barrier and a
# user's atexit handlers get a few seconds; the launcher's own teardown waits as long.
STOP_GRACE = 5.0


def stop_tree(pid: int, grace: float = STOP_GRACE) -> threading.Timer:
    """SIGTERM to ``pid``'s tree now and SIGKILL ``grace`` seconds later, without waiting: safe
    in a signal handler that interrupted a ``wait()`` (which holds Popen's lock), and the timer
    never keeps the process from exiting."""
    signal_tree(pid, signal.SIGTERM)
    timer = threading.Timer(grace, signal_tree, (pid, signal.SIGKILL))
    timer.daemon = True
    timer.start()
    return timer


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        name = _signal_name(-returncode)
        hint = " (often the out-of-memory killer: see `dmesg`)" if -returncode == signal.SIGKILL \
            else ""
        return f"killed by {name}{hint}"
    signum = returncode - signal_exit(0)
    if 0 < signum <= 64:  # a shell's or a remote wrapper's way to say "signal"
        return f"exit code {returncode} (128+{signum}: {_signal_name(signum)})"
    return f"exit code {returncode}"


def signal_exit(signum: int) -> int:
    """The exit status a shell gives a process that died of signal ``signum``: the one
    definition of 128+N, which the launcher and its children both exit with."""
    return 128 + signum


def exit_status(returncode: int) -> int:
    """The shell's view of a Popen return code (negative: killed by that signal)."""
    return signal_exit(-returncode) if returncode < 0 else returncode


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
