"""What an attempt of a job came to, as frozen values built once.

An attempt runs as a pipeline of values: the monitor's ``watch`` returns what ended it (an
:class:`Ending`), closing the process group returns what the teardown did (a
:class:`Teardown`) and what each process left (its :class:`ProcessEnd`), and the pure
:func:`diagnose` turns the three into an :class:`Attempt`: who failed first and why (a
:class:`Failure` of a :class:`Kind`), the later failures, what was stopped. The job's
:class:`LaunchResult` holds every attempt; each exit code is derived in one property.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import elastic, wire
from .child.proctree import describe_exit, exit_status, signal_exit
from .plan import LaunchPlan
from .pslite import dmlc_reason

LOST_EXIT = 75  # the job ended because the connection to a host was lost (sysexits' TEMPFAIL)
STALL_EXIT = 124  # a stalled job (as timeout(1) has it)
START_TIMEOUT_EXIT = 1  # the job did not form within --start-timeout


class Kind(enum.Enum):
    """Why an attempt failed."""

    EXIT = "exit"  # a process exited non-zero by itself
    SIGNAL = "signal"  # a process was killed by a signal the teardown did not send
    LOST_HOST = "lost host"  # the connection to a process's host was lost
    REFUSED = "server refusal"  # a scheduler or server refused a command from the network
    PORT_TAKEN = "port taken"  # the scheduler's port was taken before it could bind it
    STALL = "stall"  # no worker made progress for --stall-timeout
    START_TIMEOUT = "start timeout"  # the job did not form within --start-timeout
    STOPPED = "stop request"  # the launcher was asked to stop (Ctrl-C, SIGTERM, SIGHUP)

    @property
    def of_job(self) -> bool:
        """The job as a whole failed, not one process of it."""
        return self in (Kind.STALL, Kind.START_TIMEOUT, Kind.STOPPED)


@dataclass(frozen=True)
class Failure:
    kind: Kind
    reason: str  # one line
    label: str = ""  # "worker 1", "server 0", "scheduler"; "" when the job as a whole failed
    host: str = ""
    tail: Tuple[str, ...] = ()  # last lines of its output
    traceback: Tuple[str, ...] = ()
    time: float = 0.0  # when it happened (time.time()): its error record's, else when noticed
    from_error_file: bool = False  # the traceback is the worker's own record, not scraped
    status: int = 0  # the process's exit status as a shell has it; a stop's 128+N
    # why dmlc (MXNet's, ps-lite's logging) said it ended, from its last lines: "Check failed:
    # ..."; "" when it said nothing (pslite.dmlc_reason)
    cause: str = ""

    @property
    def lost(self) -> bool:
        return self.kind is Kind.LOST_HOST

    @property
    def exit_code(self) -> int:
        """The launcher's exit code when this failure ends the job: never 0."""
        return {Kind.LOST_HOST: LOST_EXIT, Kind.STALL: STALL_EXIT,
                Kind.START_TIMEOUT: START_TIMEOUT_EXIT}.get(self.kind, self.status) or 1


@dataclass(frozen=True)
class Stall:
    seconds: float  # how long no worker had progressed
    workers: Tuple[str, ...]  # "worker 1 (20 batches, the last 31s ago)", stopped-first first
    stacks: Mapping[str, Tuple[str, ...]]  # each worker's dump, by label, in that order
    first_known: bool = False  # the heartbeats tell which worker stopped first


class Why(enum.Enum):
    """What ended the monitor's watch."""

    DONE = "every worker succeeded"
    EXITED = "a process failed"
    TIMED_OUT = "the job did not form in time"
    STALLED = "no worker progressed"
    STOPPED = "a stop was requested"


@dataclass(frozen=True)
class Ending:
    why: Why
    label: str = ""  # EXITED: the process whose exit was noticed first
    reason: str = ""  # TIMED_OUT, STALLED: one line
    stall: Optional[Stall] = None
    signum: Optional[int] = None  # STOPPED: by which signal
    time: float = 0.0  # time.time() when it ended


@dataclass(frozen=True)
class Unreaped:
    label: str
    pid: int
    state: str  # as /proc says it ("D (disk sleep)")


@dataclass(frozen=True)
class Teardown:
    stopped: Tuple[str, ...] = ()  # labels of the processes the teardown had to stop
    unreaped: Tuple[Unreaped, ...] = ()  # alive after SIGKILL


@dataclass(frozen=True)
class ProcessEnd:
    """What one process of an attempt left, read once its group was closed."""

    label: str
    role: str
    host: str
    returncode: Optional[int]  # Popen's (negative: that signal); None if it never exited
    wall: float = 0.0  # time.time() when its exit was noticed
    tail: Tuple[str, ...] = ()  # its last output lines, ps-lite's chatter left out
    error: Optional[dict] = None  # its error record (errorfile.py), if it wrote one
    lost: bool = False  # the transport says its connection was lost, not that it failed


@dataclass(frozen=True)
class Attempt:
    """One start of the job, from plan to teardown."""

    plan: Optional[LaunchPlan]
    failure: Optional[Failure] = None  # the root cause; None when the job succeeded
    others: Tuple[Failure, ...] = ()  # later failures, in time order
    stall: Optional[Stall] = None
    stopped: Tuple[str, ...] = ()  # labels the teardown stopped (failed ones left out)
    unreaped: Tuple[str, ...] = ()  # labels alive after SIGKILL
    # the workers stopped at a checkpoint, as the launcher asked, for the job to grow
    resized: bool = False
    # workers the launcher's grow request itself ended (GrowEnd.CUT_SHORT): not failures
    cut_short: Tuple[str, ...] = ()
    # (host, what became of the job's processes there) for each lost host, once the launcher
    # tried to stop them itself (Transport.stop_left)
    left_on_lost: Tuple[Tuple[str, str], ...] = ()

    @property
    def exit_code(self) -> int:
        return 0 if self.failure is None else self.failure.exit_code

    @property
    def ended(self) -> str:
        """Why the attempt ended, in a few words."""
        if self.failure is not None:
            return self.failure.reason
        return "stopped to grow" if self.resized else "succeeded"

    @property
    def workers(self) -> int:
        return len(self.plan.of_role("worker")) if self.plan else 0

    @property
    def signal(self) -> Optional[int]:
        """The signal the job was stopped by on request, if it was."""
        f = self.failure
        return f.status - signal_exit(0) if f is not None and f.kind is Kind.STOPPED else None


@dataclass(frozen=True)
class LaunchResult:
    """What a job came to: every attempt (restarts, port retries and grows included), the last one
    deciding; ``logs`` holds every output line of each process by label when the supervisor
    keeps them. The one result both ``gluondist launch`` and ``gluondist.launch()`` get.

    Each :class:`Attempt` has its ``plan`` (every process and where it ran), ``workers``, its
    ``failure`` (a :class:`Failure`: ``kind``, a :class:`Kind`; ``label``, the process, or ""
    for the job as a whole; ``host``, ``reason``, ``cause`` (what MXNet or ps-lite said of
    why), ``traceback`` or ``tail``), ``others`` (later failures), ``stall``, ``stopped``,
    ``exit_code``, ``resized`` (an elastic job's workers stopped at a checkpoint to grow;
    ``cut_short``, those the request itself ended) and ``ended`` (why, in a few words); the
    properties below read the last attempt's."""

    attempts: Tuple[Attempt, ...]
    logs: Dict[str, List[str]] = field(default_factory=dict)

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]

    @property
    def exit_code(self) -> int:
        return self.last.exit_code

    @property
    def failure(self) -> Optional[Failure]:
        return self.last.failure

    @property
    def others(self) -> Tuple[Failure, ...]:
        return self.last.others

    @property
    def stall(self) -> Optional[Stall]:
        return self.last.stall

    @property
    def stopped(self) -> Tuple[str, ...]:
        return self.last.stopped

    @property
    def unreaped(self) -> Tuple[str, ...]:
        return self.last.unreaped

    @property
    def plan(self) -> Optional[LaunchPlan]:
        return self.last.plan

    @property
    def left_on_lost(self) -> Tuple[Tuple[str, str], ...]:
        return self.last.left_on_lost

    @property
    def restarts(self) -> Tuple[Failure, ...]:
        """The failures the job was restarted from (a retry on another port is none)."""
        return restarted_from(self.attempts[:-1])

    @property
    def grows(self) -> int:
        """How many times the job stopped at a checkpoint and started again with more workers
        (one whose new hosts were gone by the restart started with as many: no grow)."""
        return sum(a.resized and b.workers > a.workers
                   for a, b in zip(self.attempts, self.attempts[1:]))

    @property
    def regrown(self) -> int:
        """How many times the job stopped at a checkpoint to grow and started again with no
        more workers (the new hosts were gone by the restart)."""
        return sum(a.resized for a in self.attempts[:-1]) - self.grows

    @property
    def port_retries(self) -> int:
        """How many attempts were started again on another port, the scheduler's taken."""
        taken = sum(a.failure is not None and a.failure.kind is Kind.PORT_TAKEN
                    for a in self.attempts[:-1])  # those restarted_from did not restart from
        return taken - sum(f.kind is Kind.PORT_TAKEN for f in self.restarts)


class GrowEnd(enum.Enum):
    """How a worker ended because the launcher asked the job to grow."""

    STOPPED = "stopped at a checkpoint"  # wire.RESIZED, gluondist.elastic's exit
    # killed by elastic.SIGNAL's default action: the request reached a worker that could not
    # take it (a script that reset the handler; a bootstrap started without the signal held)
    CUT_SHORT = "ended by the request"


def grow_end(role: str, returncode: Optional[int], asked: bool) -> Optional[GrowEnd]:
    """How a process that exited with ``returncode`` (Popen's, or the remote side's status;
    None: not exited) ended because the launcher ``asked`` the job to grow, or None. The one
    rule the monitor (a worker that STOPPED succeeded) and diagnose (the attempt ``resized``,
    a CUT_SHORT worker not blamed) both apply; unasked, or from a scheduler or server, either
    ending is an exit like any other, the worker's own failure."""
    if not asked or role != "worker" or returncode is None:
        return None
    status = exit_status(returncode)
    if status == wire.RESIZED:
        return GrowEnd.STOPPED
    return GrowEnd.CUT_SHORT if status == signal_exit(elastic.SIGNAL) else None


def stopped_to_grow(role: str, returncode: Optional[int], asked: bool) -> bool:
    """Whether the process stopped at a checkpoint as asked (see grow_end)."""
    return grow_end(role, returncode, asked) is GrowEnd.STOPPED


PORT_RETRIES = 2  # a scheduler's port taken (before it could bind it) is retried twice


def restarted_from(attempts: Sequence[Attempt]) -> Tuple[Failure, ...]:
    """The failures among ``attempts``, each of which another attempt followed, that were
    restarts: all but the first PORT_RETRIES taken ports, which were retries."""
    restarts, retries = [], 0
    for attempt in attempts:
        if attempt.failure is None:  # it stopped to grow
            continue
        if attempt.failure.kind is Kind.PORT_TAKEN and retries < PORT_RETRIES:
            retries += 1
        else:
            restarts.append(attempt.failure)
    return tuple(restarts)


def diagnose(plan: Optional[LaunchPlan], ending: Ending, teardown: Teardown,
             ends: Sequence[ProcessEnd], asked_to_resize: bool = False) -> Attempt:
    """The attempt ``ending`` ended, ``teardown`` closed and ``ends`` describe: every process
    that failed by itself, earliest first by when it happened (a worker's error record tells;
    otherwise when the monitor noticed), so the root cause leads even when the monitor
    noticed a later failure first. A worker the launcher's own grow request ended is no
    failure (``cut_short``): with no other, the attempt stopped to grow."""
    unreaped = tuple(u.label for u in teardown.unreaped)
    if ending.why is Why.DONE:
        resized = any(stopped_to_grow(e.role, e.returncode, asked_to_resize) for e in ends)
        return Attempt(plan, stopped=teardown.stopped, unreaped=unreaped, resized=resized)
    if ending.why is not Why.EXITED:
        return Attempt(plan, _job_failure(ending), stall=ending.stall, stopped=teardown.stopped,
                       unreaped=unreaped)
    by_label = {e.label: e for e in ends}
    first = by_label[ending.label]
    cut = tuple(e.label for e in ends
                if grow_end(e.role, e.returncode, asked_to_resize) is GrowEnd.CUT_SHORT)
    failures = [] if first.label in cut else [_failure(first)]
    noticed = failures[0].time if failures else first.wall
    for end in ends:
        if end.label == first.label or end.returncode is None or end.label in cut:
            continue
        own = end.label not in teardown.stopped and end.returncode != 0 and (
            end.role == "worker" or end.wall <= noticed)
        if own or end.error is not None:
            failures.append(_failure(end, lost=own and end.lost))
    if not failures:
        return Attempt(plan, stopped=teardown.stopped, unreaped=unreaped, resized=True,
                       cut_short=cut)
    failures.sort(key=lambda f: f.time)
    root = failures[0]
    # one lost host is one failure, however many of its sessions noticed before the teardown
    others = tuple(f for f in failures[1:] if not (f.lost and root.lost and f.host == root.host))
    named = {root.label} | {f.label for f in others}  # failed, not "stopped"
    return Attempt(plan, root, others, stopped=tuple(s for s in teardown.stopped
                                                     if s not in named), unreaped=unreaped,
                   cut_short=cut)


def _job_failure(ending: Ending) -> Failure:
    if ending.why is Why.STOPPED:
        return Failure(Kind.STOPPED, f"stopped by signal {ending.signum}", time=ending.time,
                       status=signal_exit(ending.signum))
    kind = Kind.STALL if ending.why is Why.STALLED else Kind.START_TIMEOUT
    return Failure(kind, ending.reason, time=ending.time)


def _failure(end: ProcessEnd, lost: Optional[bool] = None) -> Failure:
    lost = end.lost if lost is None else lost
    code = end.returncode
    status = exit_status(code)
    if lost:
        kind, reason = Kind.LOST_HOST, f"lost the connection to host {end.host}"
    elif end.role != "worker" and status == wire.REFUSED:
        kind, reason = Kind.REFUSED, f"refused a command ({describe_exit(code)})"
    elif end.role == "scheduler" and status == wire.PORT_TAKEN:
        kind, reason = Kind.PORT_TAKEN, f"its port was taken ({describe_exit(code)})"
    else:
        kind, reason = (Kind.SIGNAL if code < 0 else Kind.EXIT), describe_exit(code)
    record = end.error
    if record is not None:
        # a worker that recorded its exception and was then killed (or left with its own
        # os._exit(0)) failed with the exception: Python's code for it, 1
        return Failure(kind, reason, end.label, end.host, end.tail[-15:],
                       tuple(record.get("traceback") or ()), float(record["time"]), True,
                       1 if code <= 0 else status, dmlc_reason(end.tail))
    return Failure(kind, reason, end.label, end.host, end.tail[-15:],
                   () if lost else _traceback(end.tail), end.wall, status=status,
                   cause="" if lost else dmlc_reason(end.tail))


def _traceback(lines: Sequence[str]) -> Tuple[str, ...]:
    starts = [i for i, l in enumerate(lines) if l.startswith("Traceback (most recent call last)")]
    return tuple(lines[starts[-1]:]) if starts else ()
