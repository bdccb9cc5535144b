"""Watch one attempt of a job until something ends it, and say what (an outcome.Ending)."""
from __future__ import annotations

import time
from typing import Optional

from .outcome import Ending, Stall, Why, stopped_to_grow
from .plan import LaunchPlan, ProcessSpec
from .process import ProcessGroup
from .pslite import BOUND, FORMED, PSLITE
from .stall import StallWatch


GRACE = 10.0  # how long servers and scheduler get to stop after the last worker succeeded
POLL = 0.05  # seconds between the monitor's looks: a failure is seen within 50 ms, at no cost
STACK_WAIT = 5.0  # the longest the launcher waits for the workers' stacks
STACK_QUIET = 0.5  # a dump is complete once its worker printed nothing for this long


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
          stall_timeout: Optional[float] = None, stop=None, resizing=None) -> Ending:
    """Poll ``group`` (started) until every worker succeeded, a process failed, the job did not
    form in time, (with ``stall_timeout``) no worker progressed for that long, or ``stop`` (a
    StopRequest) was set; return what ended it. Once ``resizing`` (an Event) is set, a worker
    that stopped as asked (outcome.stopped_to_grow) counts as succeeded."""
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
            asked = stopped_to_grow(spec.role, exited.returncode,
                                    resizing is not None and resizing.is_set())
            if spec.label in workers and (exited.returncode == 0 or asked):
                succeeded.add(spec.label)
                continue
            if spec.label not in workers and (exited.returncode == 0 or succeeded == workers):
                # ps-lite stops the scheduler and servers (code 0) only after every worker
                # passed the final barrier: the workers are just finishing their exit.
                continue
            return Ending(Why.EXITED, spec.label, time=exited.wall)
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


def _finish(group: ProcessGroup, formed: bool, stop) -> Ending:
    # Servers and scheduler stop by themselves after the workers' final barrier; a job that
    # never formed (a script that made no kvstore) has none, so they are stopped at once.
    deadline = time.monotonic() + (GRACE if formed else 0.0)
    while group.running() and time.monotonic() < deadline:
        if stop:
            return _stopped(stop)
        group.poll()
        time.sleep(POLL)
    return Ending(Why.DONE, time=time.time())


def _stopped(stop) -> Ending:
    return Ending(Why.STOPPED, signum=stop.signum, time=time.time())


def _stalled(group: ProcessGroup, stalls: StallWatch, idle: float) -> Ending:
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
            stacks[child.spec.label] = tuple(lines) or ("(no stack arrived within "
                                                        f"{STACK_WAIT:g}s)",)
        else:
            stacks[child.spec.label] = tuple(lines) + (
                "(not run under gluondist's bootstrap: no stack; launch a SCRIPT.py or "
                "python -m)",)
    reason = (f"the job stalled: no worker made progress for {idle:.0f}s "
              f"(--stall-timeout {stalls.timeout:g})")
    return Ending(Why.STALLED, reason=reason, time=time.time(),
                  stall=Stall(idle, tuple(described), stacks, told))


def _timed_out(plan: LaunchPlan, joins: Joins, timeout: float) -> Ending:
    missing = [s.label for s in plan.specs if s.role != "scheduler" and s.label not in joins.bound]
    if missing:
        reason = (f"the job did not form within {timeout:g}s: {', '.join(missing)} did not join "
                  "(never started a kvstore); raise --start-timeout if start-up is just slow")
    else:
        reason = (f"the job did not form within {timeout:g}s: every node started but the "
                  "scheduler did not confirm them; check the address and firewall")
    return Ending(Why.TIMED_OUT, reason=reason, time=time.time())
