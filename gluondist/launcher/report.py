"""What the launcher tells a person about a failed, stalled or restarted job, as lines."""
from __future__ import annotations

import re
from typing import List, Mapping, Union

from .child import BOOTSTRAP, source_path
from .outcome import Attempt, Failure, Kind, LaunchResult

Result = Union[Attempt, LaunchResult]  # an attempt, or the job (its last attempt's figures)

P = "gluondist: "
INDENT = "    "
LOST_HINT = ("ssh gave up on that session without the remote side's exit report: the host or "
             "its link is down, the launcher's own network is cut, or the remote side was "
             "killed there (the OOM killer, kill -9)")


def _where(f: Failure, result: Result) -> str:
    return f" on {f.host}" if f.host and result.plan and result.plan.spans_hosts else ""


def failure_lines(result: Result, lead: str = "") -> List[str]:
    """The root cause first (its traceback, else its last lines), any stall's stacks, the later
    failures in one line each, then what the teardown stopped. No exit code: a restart uses
    this too, and must not read like the end."""
    f = result.failure
    if f is None:
        return []
    if f.lost:
        lines = [f"{P}{lead}{f.reason}, where {_roles_on(f.host, result)} ran", P + LOST_HINT]
    elif f.kind.of_job:
        lines = [f"{P}{lead}{f.reason}"]
    else:
        lines = [f"{P}{lead}{f.label}{_where(f, result)} failed first: {_reason(f)}"]
    body = [] if f.lost else f.traceback or f.tail
    if body:
        what = "its traceback" if f.traceback else "its last lines"
        if f.from_error_file:
            what += " (from its error record)"
        lines.append(f"{P}{what}:")
        lines += [INDENT + l for l in body]
    if result.stall is not None:
        lines += _stall_lines(result)
    for other in result.others:
        last = other.traceback[-1] if other.traceback else _reason(other)
        lines.append(f"{P}then {other.label}{_where(other, result)} failed: {last}")
    lost_here = {s.label for s in result.plan.specs if s.host == f.host} \
        if f.lost and result.plan else set()  # named above: the launcher could not stop them
    stopped = [label for label in result.stopped if label not in lost_here]
    if stopped:
        lines.append(f"{P}stopped {', '.join(stopped)}")
    return lines + left_lines(result)


def left_lines(result: Result) -> List[str]:
    """What became of the job's processes on the hosts it lost (Transport.stop_left)."""
    return [f"{P}host {host} {what}" for host, what in result.left_on_lost]


def _reason(f: Failure) -> str:
    """How it ended, with what dmlc said of why, if it said it ("killed by SIGABRT: Check
    failed: ..."), whatever the role: a server's abort has no traceback to show it."""
    return f"{f.reason}: {f.cause}" if f.cause else f.reason


def _roles_on(host: str, result: Result) -> str:
    labels = [s.label for s in result.plan.specs if s.host == host] if result.plan else []
    return ", ".join(labels) or "nothing"


def _stall_lines(result: Result) -> List[str]:
    stall = result.stall
    if stall.first_known:
        lines = [f"{P}stopped progressing first: {stall.workers[0]}"]
        lines += [f"{P}then: {'; '.join(stall.workers[1:])}"] if stall.workers[1:] else []
    else:
        lines = [f"{P}the heartbeats cannot tell which worker stopped first: "
                 f"{'; '.join(stall.workers)}"]
    for label, stack in stall.stacks.items():
        lines.append(f"{P}{label}'s stack (every thread, most recent call first):")
        lines += [INDENT + l for l in stack if l.strip() and not _launch_frame(l)]
    return lines


BOOTSTRAP_FILE = source_path(BOOTSTRAP)
STDLIB_RUNPY = re.compile(r"/python3\.\d+/runpy\.py\b")  # not a user's own runpy.py


def _launch_frame(line: str) -> bool:
    """The frames every worker has below the script's (runpy, frozen from Python 3.11, and the
    bootstrap): left in the log, left out of the report."""
    return "<frozen runpy>" in line or STDLIB_RUNPY.search(line) is not None or \
        BOOTSTRAP_FILE in line


def final_lines(result: LaunchResult, also_lost: Mapping[str, str] = {}) -> List[str]:
    """The job's last report; ``also_lost``: other hosts of the last attempt that no longer
    answer (host: why), named beside the lost host that ended it."""
    if result.failure is None:
        done = [f"{len(result.restarts)} restart(s)"] if result.restarts else []
        done += [f"growing {result.grows} time(s)"] if result.grows else []
        done += [f"stopping {result.regrown} time(s) to grow onto hosts gone by the restart"] \
            if result.regrown else []
        return [f"{P}succeeded after {' and '.join(done)}"] if done else []
    used = [f"{P}no restart left: all {len(result.restarts)} of --max-restarts used"] \
        if result.restarts else []
    lost = [f"{P}host {name} does not answer either ({why}): it was lost too, and its processes "
            "could not be stopped from here" for name, why in also_lost.items()]
    return failure_lines(result) + lost + used + [exit_line(result)]


def exit_line(result: Result) -> str:
    kind = result.failure.kind if result.failure is not None else None
    named = {Kind.STALL: " (stalled)", Kind.LOST_HOST: " (lost a host)"}.get(kind, "")
    return f"{P}exit code {result.exit_code}{named}"
