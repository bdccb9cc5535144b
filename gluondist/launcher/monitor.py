"""Run a plan to its end and say what went wrong first."""
from __future__ import annotations

import logging
import os
import re
import socket
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from .plan import LaunchPlan, ProcessSpec, build_plan
from .options import LaunchOptions
from .process import ProcessGroup, describe_exit, exit_status

log = logging.getLogger(__name__)

# ps-lite's messages (PS_VERBOSE=1), which tell when a node started its kvstore and when the
# scheduler has everyone.
PSLITE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S*ps-lite/\S+: ")
BOUND = "Bind to role="
FORMED = "the scheduler is connected to"
PORT_TAKEN = "bind failed"
PORT_ATTEMPTS = 3
GRACE = 10.0  # how long servers and scheduler get to stop after the last worker succeeded
POLL = 0.05


@dataclass
class Failure:
    label: str  # "worker 1", "server 0", "scheduler", or "job" for a start timeout
    reason: str  # one line
    host: str = ""
    tail: List[str] = field(default_factory=list)  # last lines of its output
    traceback: List[str] = field(default_factory=list)


@dataclass
class LaunchResult:
    exit_code: int
    failure: Optional[Failure] = None
    stopped: List[str] = field(default_factory=list)  # labels stopped by the teardown
    attempts: int = 1
    plan: Optional[LaunchPlan] = None
    restarts: List[Failure] = field(default_factory=list)  # the failures restarted from
    logs: Dict[str, List[str]] = field(default_factory=dict)  # filled by gluondist.launch()


def free_ports(count: int, host: str = "127.0.0.1") -> List[int]:
    """``count`` distinct ports the OS reports free right now. They are released before use, so
    one may be taken meanwhile: the scheduler's case is retried, a node's ps-lite re-picks."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]


def run(options: LaunchOptions, on_line: Callable[[ProcessSpec, str], None],
        cores: int = 1, base_env=None, transport=None,
        on_plan: Callable[[LaunchPlan], None] = None, ports=free_ports,
        on_restart: Callable[[LaunchResult, int], None] = None) -> LaunchResult:
    """Validate, start the job, watch it, and stop every process before returning.

    ``on_line(spec, line)`` receives each line of output; ``ports(count, host)`` picks the
    ports of each attempt. A failed job is started again, on fresh ports, up to
    ``options.max_restarts`` times; ``on_restart(failed_result, restart_number)`` hears of each.
    A KeyboardInterrupt (or any other exception) stops the job and propagates."""
    options.validate()
    if transport is None and options.launcher == "ssh":
        from .ssh import SshTransport, preflight
        preflight([h.name for h in options.hosts], options.python, options.ssh_config)
        transport = SshTransport(options.python, os.environ if base_env is None else base_env,
                                 os.getcwd(), options.ssh_config)
    elif transport is None and options.launcher == "slurm":
        from .slurm import SrunTransport
        transport = SrunTransport()
    restarts, port_retries, failures = 0, 0, []
    while True:
        port, *node_ports = ports(1 + options.num_servers + options.num_workers, options.host)
        plan = build_plan(options, port, node_ports, cores, base_env, restarts)
        if on_plan is not None and restarts == port_retries == 0:
            on_plan(plan)
        joins = _Joins(on_line)
        group = ProcessGroup(plan.specs, joins, options.log_dir, transport, restarts)
        try:
            group.start()
            result = _watch(plan, group, joins, options.start_timeout)
        finally:
            stopped = group.close()
        result.stopped = [s.label for s in stopped]
        result.attempts, result.plan = 1 + restarts + port_retries, plan
        if result.exit_code == 0:
            result.restarts = failures
            return result
        if _scheduler_port_taken(result) and port_retries < PORT_ATTEMPTS - 1:
            log.warning("the scheduler's port %d was taken; retrying on another", port)
            port_retries += 1
            continue
        if restarts >= options.max_restarts:
            result.restarts = failures
            return result
        restarts += 1
        failures.append(result.failure)
        if on_restart is not None:
            on_restart(result, restarts)


def _scheduler_port_taken(result: LaunchResult) -> bool:
    f = result.failure
    return f is not None and f.label == "scheduler" and any(PORT_TAKEN in l for l in f.tail)


class _Joins:
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


def _watch(plan: LaunchPlan, group: ProcessGroup, joins: _Joins,
           start_timeout: float) -> LaunchResult:
    workers = {s.label for s in plan.of_role("worker")}
    started = time.monotonic()
    succeeded = set()
    while True:
        for exited in group.poll():
            spec = exited.spec
            if spec.label in workers and exited.returncode == 0:
                succeeded.add(spec.label)
                continue
            if spec.label not in workers and (exited.returncode == 0 or succeeded == workers):
                # ps-lite stops the scheduler and servers (code 0) only after every worker
                # passed the final barrier: the workers are just finishing their exit.
                continue
            return _failed(group, spec, exited.returncode)
        if succeeded == workers:
            return _finish(group, joins.formed)
        if not joins.formed and time.monotonic() - started > start_timeout:
            return _timed_out(plan, joins, start_timeout)
        time.sleep(POLL)


def _finish(group: ProcessGroup, formed: bool) -> LaunchResult:
    # Servers and scheduler stop by themselves after the workers' final barrier; a job that
    # never formed (a script that made no kvstore) has none, so they are stopped at once.
    deadline = time.monotonic() + (GRACE if formed else 0.0)
    while group.running() and time.monotonic() < deadline:
        group.poll()
        time.sleep(POLL)
    return LaunchResult(0)


def _failed(group: ProcessGroup, spec: ProcessSpec, returncode: int) -> LaunchResult:
    child = group.child(spec)
    child.reader.join(timeout=1.0)  # let its last lines arrive
    tail = [l for l in child.tail if not is_pslite_chatter(l)]
    return LaunchResult(exit_status(returncode),
                        Failure(spec.label, describe_exit(returncode), host=spec.host,
                                tail=tail[-15:], traceback=_traceback(tail)))


def _timed_out(plan: LaunchPlan, joins: _Joins, timeout: float) -> LaunchResult:
    missing = [s.label for s in plan.specs if s.role != "scheduler" and s.label not in joins.bound]
    if missing:
        reason = (f"the job did not form within {timeout:g}s: {', '.join(missing)} did not join "
                  "(never started a kvstore); raise --start-timeout if start-up is just slow")
    else:
        reason = (f"the job did not form within {timeout:g}s: every node started but the "
                  "scheduler did not confirm them; check the address and firewall")
    return LaunchResult(1, Failure("job", reason))


def _traceback(lines: List[str]) -> List[str]:
    starts = [i for i, l in enumerate(lines) if l.startswith("Traceback (most recent call last)")]
    return lines[starts[-1]:] if starts else []


def _is_error(line: str) -> bool:
    low = line.lower()
    return "failed" in low or "error" in low or "fatal" in low


def is_pslite_chatter(line: str) -> bool:
    """ps-lite's routine messages, which the console hides (the log files keep them)."""
    return bool(PSLITE.match(line)) and not _is_error(line)
