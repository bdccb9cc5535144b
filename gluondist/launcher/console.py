"""What a person sees of a job, through ``show(text, note)``: each process's output lines
prefixed ``[worker 1]`` (ps-lite's routine chatter filtered), the launcher's notes and reports
as ``gluondist: ...`` with ``note=True``. :func:`terminal` is the console both doors show a job
on; a :class:`Console` is one job's, and keeps every output line, filtered or not, when asked.
"""
from __future__ import annotations

import sys
import threading
from typing import Dict, List, Optional, Sequence

from .outcome import Ending, Unreaped
from .plan import ProcessSpec
from .pslite import is_pslite_chatter
from .transports import Show


def terminal() -> Show:
    """The console both doors show the job on: process lines on stdout, the launcher's notes
    and reports on stderr, one locked write per line (lines from different processes never
    mix). A line the console cannot take (a gone terminal, ``| head``, a closed stdout, an
    encoding such as ``PYTHONIOENCODING=ascii`` that lacks its characters) is dropped, said
    once on stderr, and the job goes on: the logs keep every line."""
    lock = threading.Lock()
    told = []

    def show(text: str, note: bool) -> None:
        stream = sys.stderr if note else sys.stdout
        with lock:
            try:
                if stream is None:  # started with the descriptor closed (`>&-`)
                    raise OSError("it is closed")
                stream.write(text + "\n")
                stream.flush()
            except Exception as exc:  # noqa: BLE001 (any of them must not stop the job)
                if not note and not told:
                    told.append(exc)
                    _dropping(exc)
    return show


def _dropping(exc: Exception) -> None:
    try:
        sys.stderr.write(f"gluondist: the console cannot take an output line ({exc}); such "
                         "lines are dropped, --log-dir keeps them all\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 (no stderr either: the exit code still tells)
        pass


class Console:
    """One job's console over ``show``. ``line`` is what the process group hands each output
    line to; with ``keep_logs`` it also keeps them all in ``logs``, by label (a restart's after
    the failed attempt's); ``hide_chatter`` leaves ps-lite's routine messages off the
    console (PS_VERBOSE unset), never out of ``logs``."""

    def __init__(self, show: Show, keep_logs: bool = False, hide_chatter: bool = True):
        self.show = show
        self.logs: Dict[str, List[str]] = {}
        self._keep, self._hide = keep_logs, hide_chatter
        self._lock = threading.Lock()  # each process's output is read by a thread of its own

    def note(self, text: str) -> None:
        """A note of the launcher's: ``gluondist: text``."""
        self.show(f"gluondist: {text}", True)

    def report(self, lines: Sequence[str]) -> None:
        """Lines of a report (report.py's, each already ``gluondist: ...``)."""
        for line in lines:
            self.show(line, True)

    def line(self, spec: ProcessSpec, line: str) -> None:
        if self._keep:
            with self._lock:
                self.logs.setdefault(spec.label, []).append(line)
        if not (self._hide and is_pslite_chatter(line)):
            self.show(f"[{spec.label}] {line}", False)

    def teardown(self, unreaped: Sequence[Unreaped], stopped: Sequence[ProcessSpec],
                 ending: Optional[Ending]) -> None:
        """What a teardown left behind, and, when an interrupt ended the attempt (no
        ``ending``, or a stop request's), what it stopped."""
        for u in unreaped:
            self.note(f"{u.label} (pid {u.pid}) did not die after SIGKILL, in state {u.state} "
                      "(D: uninterruptible sleep, often a hung file system); left behind")
        interrupted = ending is None or ending.signum is not None
        if interrupted and stopped:
            self.note(f"stopped {', '.join(s.label for s in stopped)}")
