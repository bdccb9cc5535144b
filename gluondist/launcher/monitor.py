"""Watch one attempt of a job to its end and say what went wrong first."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional

from .plan import LaunchPlan, ProcessSpec
from .process import Child, ProcessGroup
from .child.proctree import describe_exit, exit_status
from .stall import STALL_EXIT, StallWatch


# ps-lite's messages (PS_VERBOSE=1), which tell when a node started its kvstore and when the
# scheduler has everyone.
PSLITE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S*ps-lite/\S+: ")
BOUND = "Bind to role="
FORMED = "the scheduler is connected to"
PORT_TAKEN = "bind failed"
GRACE = 10.0  # how long servers and scheduler get to stop after the last worker succeeded
POLL = 0.05  # seconds between the monitor's looks: a failure is seen within 50 ms, at no cost
LAST_LINES_WAIT = 1.0  # for a failed process's last lines to reach its log before the report
EXIT_REPORT_WAIT = 2.0  # for an ssh session's exit report, which follows its output
STACK_WAIT = 5.0  # the longest the launcher waits for the workers' stacks
STACK_QUIET = 0.5  # a dump is complete once its worker printed nothing for this long
LOST_EXIT = 75  # the job ended because the connection to a host was lost (sysexits' TEMPFAIL)


@dataclass
class Failure:
    label: str  # "worker 1", "server 0", "scheduler", or "job" (start timeout, stall)
    reason: str  # one line
    host: str = ""
    tail: List[str] = field(default_factory=list)  # last lines of its output
    traceback: List[str] = field(default_factory=list)
    time: float = 0.0  # when it happened (time.time()): its error record's, else when noticed
    from_error_file: bool = False  # the traceback is the worker's own record, not scraped
    lost: bool = False  # it did not fail: the connection to its host was lost


@dataclass
class Stall:
    seconds: float  # how long no worker had progressed
    workers: List[str]  # "worker 1 (20 batches, the last 31s ago)", stopped-first first
    stacks: Dict[str, List[str]]  # each worker's dump, by label, in that order
    first_known: bool = False  # the heartbeats tell which worker stopped first


@dataclass(frozen=True)
class LaunchResult:
    """What a job came to. ``watch`` makes an attempt's, ``rank_failures`` orders its
    failures (a new result), and the session adds the attempts, restarts and logs: the one
    result both ``gluondist launch`` and ``gluondist.launch()`` get."""

    exit_code: int
    failure: Optional[Failure] = None
    stopped: List[str] = field(default_factory=list)  # labels stopped by the teardown
    attempts: int = 1
    plan: Optional[LaunchPlan] = None
    restarts: List[Failure] = field(default_factory=list)  # the failures restarted from
    logs: Dict[str, List[str]] = field(default_factory=dict)  # when the session keeps them
    others: List[Failure] = field(default_factory=list)  # later failures, in time order
    stall: Optional[Stall] = None
    signal: Optional[int] = None  # the job was stopped on request (a StopRequest), by this
    unreaped: List[str] = field(default_factory=list)  # processes alive after SIGKILL


class Joins:
    """Passes each line on, noting which nodes started their kvstore and when the job formed."""

    def __init__(self, on_line):
        self.on_line, self.bound, self.formed = on_line, set(), False

    def __call__(self, spec: ProcessSpec, line: str) -> None:
        if PSLITE.match(line):
            if BOUND in line:
                self.bound.add(spec.label)
            elif FORMED in line:
                self.formed = True
        self.on_line(spec, line)


def watch(plan: LaunchPlan, group: ProcessGroup, joins: Joins, start_timeout: float,
          stall_timeout: Optional[float] = None, stop=None) -> LaunchResult:
    """Poll ``group`` (started) until every worker succeeded, a process failed, the job did not
    form in time, (with ``stall_timeout``) no worker progressed for that long, or ``stop`` (a
    StopRequest) was set: then the result's ``signal`` says by which signal."""
    workers = {s.label for s in plan.of_role("worker")}
    started = time.monotonic()
    succeeded = set()
    stalls = None
    if stall_timeout is not None:
        stalls = StallWatch(stall_timeout, group.transport,
                            [c for c in group.children if c.spec.role == "worker"])
    while True:
        if stop:
            return _stopped(stop)
        for exited in group.poll():
            spec = exited.spec
            if spec.label in workers and exited.returncode == 0:
                succeeded.add(spec.label)
                continue
            if spec.label not in workers and (exited.returncode == 0 or succeeded == workers):
                # ps-lite stops the scheduler and servers (code 0) only after every worker
                # passed the final barrier: the workers are just finishing their exit.
                continue
            return _failed(group, spec, exited.returncode, exited.wall)
        if succeeded == workers:
            return _finish(group, joins.formed, stop)
        now = time.monotonic()
        if not joins.formed and now - started > start_timeout:
            return _timed_out(plan, joins, start_timeout)
        # Stalls count from the moment the job formed: before that, start-up (imports, data
        # downloads) is --start-timeout's business.
        idle = stalls.check(now) if stalls is not None and joins.formed else None
        if idle is not None:
            return _stalled(group, stalls, idle)
        time.sleep(POLL)


def _finish(group: ProcessGroup, formed: bool, stop) -> LaunchResult:
    # Servers and scheduler stop by themselves after the workers' final barrier; a job that
    # never formed (a script that made no kvstore) has none, so they are stopped at once.
    deadline = time.monotonic() + (GRACE if formed else 0.0)
    while group.running() and time.monotonic() < deadline:
        if stop:
            return _stopped(stop)
        group.poll()
        time.sleep(POLL)
    return LaunchResult(0)


def _stopped(stop) -> LaunchResult:
    return LaunchResult(128 + stop.signum, signal=stop.signum)


def _failed(group: ProcessGroup, spec: ProcessSpec, returncode: int, when: float) -> LaunchResult:
    child = group.child(spec)
    child.reader.join(timeout=LAST_LINES_WAIT)  # let its last lines arrive
    failure = _failure(child, returncode, when, _lost(group, child))
    return LaunchResult(LOST_EXIT if failure.lost else exit_status(returncode), failure)


def _lost(group: ProcessGroup, child: Child) -> bool:
    """Whether the transport says ``child`` (exited) lost its connection instead of failing."""
    if child.side_reader is not None:
        child.side_reader.join(timeout=EXIT_REPORT_WAIT)  # the remote side's report comes last
    return group.transport.lost(child)


def _failure(child: Child, returncode: int, when: float, lost: bool = False) -> Failure:
    tail = [l for l in child.tail if l.strip() and not is_pslite_chatter(l)]
    reason = f"lost the connection to host {child.spec.host}" if lost \
        else describe_exit(returncode)
    failure = Failure(child.spec.label, reason, host=child.spec.host, tail=tail[-15:],
                      traceback=[] if lost else _traceback(tail), time=when, lost=lost)
    record = child.error_record()
    if record is not None:
        failure.traceback = list(record.get("traceback") or [])
        failure.time = float(record["time"])
        failure.from_error_file = True
    return failure


def rank_failures(result: LaunchResult, group: ProcessGroup, stopped: List[str],
                  unreaped: List[str]) -> LaunchResult:
    """After the teardown (``stopped``: the labels it stopped; ``unreaped``: those alive after
    SIGKILL): every process that failed by itself, earliest first by when it happened (a
    worker's error record tells; otherwise when the monitor noticed), so the root cause leads
    even when the monitor noticed a later failure first."""
    if result.failure is None or result.failure.label == "job":
        return replace(result, stopped=stopped, unreaped=unreaped)
    failures = []
    for child in group.children:
        exited = child.exited
        if exited is None or child.spec.label == result.failure.label:
            continue
        own = child.spec.label not in stopped and exited.returncode != 0 and (
            child.spec.role == "worker" or exited.wall <= result.failure.time)
        if own or child.error_record() is not None:
            lost = own and _lost(group, child)
            failures.append((child, _failure(child, exited.returncode, exited.wall, lost)))
    first = group.child(next(s for s in group.specs if s.label == result.failure.label))
    noticed = result.failure
    if first.error_record() is not None and not noticed.from_error_file:
        noticed = _failure(first, first.exited.returncode, first.exited.wall)
    failures.append((first, noticed))
    failures.sort(key=lambda pair: pair[1].time)
    root_child, root = failures[0]
    # one lost host is one failure, however many of its sessions noticed before the teardown
    others = [f for _, f in failures[1:] if not (f.lost and root.lost and f.host == root.host)]
    named = {root.label} | {f.label for f in others}  # failed, not "stopped"
    code = root_child.exited.returncode
    exit_code = LOST_EXIT if root.lost else \
        1 if code < 0 and root_child.error_record() else exit_status(code)
    return replace(result, exit_code=exit_code, failure=root, others=others,
                   stopped=[label for label in stopped if label not in named],
                   unreaped=unreaped)


def _stalled(group: ProcessGroup, stalls: StallWatch, idle: float) -> LaunchResult:
    now = time.monotonic()
    order = stalls.order()
    described = [f"{c.spec.label} ({stalls.describe(c, now)})" for c in order]
    told = len(order) > 1 and stalls.told_apart(order[0], order[1])
    asked = []
    for child in order:
        child.captured = []
        if group.request_stack(child):
            asked.append(child)
    deadline = time.monotonic() + STACK_WAIT
    while time.monotonic() < deadline and not all(
            c.captured and time.monotonic() - c.last_output > STACK_QUIET for c in asked):
        time.sleep(POLL)
    stacks = {}
    for child in order:
        lines, child.captured = child.captured, None
        if child in asked:
            stacks[child.spec.label] = lines or ["(no stack arrived within "
                                                 f"{STACK_WAIT:g}s)"]
        else:
            stacks[child.spec.label] = lines + ["(not run under gluondist's bootstrap: no "
                                                "stack; launch a SCRIPT.py or python -m)"]
    reason = (f"the job stalled: no worker made progress for {idle:.0f}s "
              f"(--stall-timeout {stalls.timeout:g})")
    return LaunchResult(STALL_EXIT, Failure("job", reason, time=time.time()),
                        stall=Stall(idle, described, stacks, told))


def _timed_out(plan: LaunchPlan, joins: Joins, timeout: float) -> LaunchResult:
    missing = [s.label for s in plan.specs if s.role != "scheduler" and s.label not in joins.bound]
    if missing:
        reason = (f"the job did not form within {timeout:g}s: {', '.join(missing)} did not join "
                  "(never started a kvstore); raise --start-timeout if start-up is just slow")
    else:
        reason = (f"the job did not form within {timeout:g}s: every node started but the "
                  "scheduler did not confirm them; check the address and firewall")
    return LaunchResult(1, Failure("job", reason, time=time.time()))


def scheduler_port_taken(result: LaunchResult) -> bool:
    f = result.failure
    return f is not None and f.label == "scheduler" and any(PORT_TAKEN in l for l in f.tail)


def _traceback(lines: List[str]) -> List[str]:
    starts = [i for i, l in enumerate(lines) if l.startswith("Traceback (most recent call last)")]
    return lines[starts[-1]:] if starts else []


def _is_error(line: str) -> bool:
    low = line.lower()
    return "failed" in low or "error" in low or "fatal" in low


def is_pslite_chatter(line: str) -> bool:
    """ps-lite's routine messages, which the console hides (the log files keep them)."""
    return bool(PSLITE.match(line)) and not _is_error(line)
