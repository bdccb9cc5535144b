"""The launcher's pure rules on literal values: what diagnose() makes of a job's ends (the
earliest failure first, a lost host, every kind's exit code), next_step() after each attempt
(finish, retry the port, restart, grow) and what LaunchResult counts, and the one rule for a
worker's exit after a grow request, which the monitor and diagnose both apply. The same rules
driven by real processes through the fake backend: launcher/test_control_loop.py,
launcher/test_elastic_loop.py."""
import ast
import signal
import threading
import time

import pytest

from gluondist import elastic, wire
from gluondist.launcher.monitor import Joins, watch
from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.outcome import (Attempt, Ending, Failure, Kind, LaunchResult,
                                        ProcessEnd, Teardown, Why, diagnose)
from gluondist.launcher.plan import LaunchPlan, ProcessSpec, build_plan
from gluondist.launcher.process import Exited
from gluondist.launcher.supervisor import Step, next_step
from gluondist.launcher.transports.local import LocalTransport
from conftest import ROOT
from fake_backend import WORKER as SCRIPT


def spec(role, rank, host="h"):
    return ProcessSpec(role, rank, host, ("x",), {})


PLAN = LaunchPlan(9000, (spec("scheduler", 0), spec("server", 0), spec("worker", 0),
                         spec("worker", 1, "g")))


def end(label, role, code, wall, error=None, lost=False, tail=(), host="h"):
    return ProcessEnd(label, role, host, code, wall, tuple(tail), error, lost)


def failed(kind):
    return Attempt(PLAN, Failure(kind, "r", "worker 0"))


def test_diagnose_puts_the_earliest_failure_first_whoever_was_noticed_first():
    record = {"time": 5.0, "traceback": ["Traceback (most recent call last):", "E: boom"]}
    ends = [end("scheduler", "scheduler", -15, 9.0), end("server 0", "server", -15, 9.0),
            end("worker 0", "worker", 3, 8.0), end("worker 1", "worker", 1, 7.0, record)]
    attempt = diagnose(PLAN, Ending(Why.EXITED, "worker 0", time=8.0),
                       Teardown(("scheduler", "server 0")), ends)
    assert (attempt.failure.label, attempt.failure.traceback[-1]) == ("worker 1", "E: boom")
    assert [f.label for f in attempt.others] == ["worker 0"]
    assert attempt.stopped == ("scheduler", "server 0") and attempt.exit_code == 1


def test_a_recorded_exception_is_a_failure_whatever_the_process_exited_with():
    # worker 1 raised, then its own atexit handler left with os._exit(0): the job failed
    record = {"time": 1.0, "traceback": ["RuntimeError: boom"]}
    ends = [end("worker 1", "worker", 0, 2.0, record), end("worker 0", "worker", 3, 3.0)]
    attempt = diagnose(PLAN, Ending(Why.EXITED, "worker 0"), Teardown(("scheduler",)), ends)
    assert (attempt.failure.label, attempt.exit_code) == ("worker 1", 1)


@pytest.mark.parametrize("record", [{"traceback": []}, {"time": "soon"}, {"time": True},
                                    {"time": 1.0, "traceback": "not lines"}, ["time"]])
def test_a_malformed_error_record_is_no_record(record):
    from gluondist.launcher.child import errorfile
    assert errorfile.valid(record) is None
    assert errorfile.valid({"time": 1, "traceback": ["x"]}) == {"time": 1, "traceback": ["x"]}


def test_diagnose_names_one_lost_host_once_and_its_exit_code():
    ends = [end("worker 0", "worker", 255, 1.0, lost=True, host="g"),
            end("worker 1", "worker", 255, 1.1, lost=True, host="g"),
            end("scheduler", "scheduler", -15, 2.0)]
    attempt = diagnose(PLAN, Ending(Why.EXITED, "worker 0"), Teardown(("scheduler",)), ends)
    assert attempt.failure.kind is Kind.LOST_HOST and attempt.others == ()
    assert attempt.exit_code == 75


@pytest.mark.parametrize("role,code,kind,exit_code", [
    ("server", wire.REFUSED, Kind.REFUSED, 77),
    ("scheduler", wire.PORT_TAKEN, Kind.PORT_TAKEN, 98),
    ("worker", -9, Kind.SIGNAL, 137),
    ("worker", 4, Kind.EXIT, 4),
])
def test_each_kind_of_process_failure_has_its_exit_code(role, code, kind, exit_code):
    label = role if role == "scheduler" else f"{role} 0"
    attempt = diagnose(PLAN, Ending(Why.EXITED, label), Teardown(), [end(label, role, code, 1)])
    assert (attempt.failure.kind, attempt.exit_code) == (kind, exit_code)


@pytest.mark.parametrize("why,kind,exit_code", [
    (Why.STALLED, Kind.STALL, 124), (Why.TIMED_OUT, Kind.START_TIMEOUT, 1),
    (Why.STOPPED, Kind.STOPPED, 143), (Why.DONE, None, 0)])
def test_each_ending_of_the_job_as_a_whole_has_its_exit_code(why, kind, exit_code):
    ending = Ending(why, reason="r", signum=signal.SIGTERM if why is Why.STOPPED else None)
    attempt = diagnose(PLAN, ending, Teardown(("worker 0",)), [])
    assert attempt.exit_code == exit_code
    assert (attempt.failure.kind if attempt.failure else None) is kind
    assert attempt.signal == (signal.SIGTERM if why is Why.STOPPED else None)


@pytest.mark.parametrize("kinds,max_restarts,step", [
    ([None], 0, Step.FINISH),
    ([Kind.EXIT], 0, Step.FINISH),
    ([Kind.EXIT], 1, Step.RESTART),
    ([Kind.EXIT, Kind.EXIT], 1, Step.FINISH),
    ([Kind.PORT_TAKEN], 0, Step.RETRY_PORT),
    ([Kind.PORT_TAKEN] * 3, 0, Step.FINISH),  # retried twice: the third is the end
    ([Kind.PORT_TAKEN, Kind.EXIT], 1, Step.RESTART),  # a port retry is no restart
    ([Kind.PORT_TAKEN] * 3, 1, Step.RESTART),  # out of retries, a taken port is a failure
    ([Kind.PORT_TAKEN] * 4, 1, Step.FINISH),  # ... and the restart it had counts
    ([Kind.STOPPED], 5, Step.FINISH),
])
def test_next_step_is_the_control_loops_one_rule(kinds, max_restarts, step):
    attempts = tuple(Attempt(PLAN) if k is None else failed(k) for k in kinds)
    assert next_step(LaunchResult(attempts), max_restarts) is step


def test_next_step_grows_without_counting_a_restart():
    two, three = (build_plan(LaunchOptions((SCRIPT,), num_workers=n), 9000) for n in (2, 3))
    grown = Attempt(two, resized=True)
    failed = Attempt(three, Failure(Kind.EXIT, "exit code 1", status=1))
    assert next_step(LaunchResult((grown,)), 0) is Step.GROW
    result = LaunchResult((grown, failed))
    assert (result.grows, len(result.restarts), result.port_retries) == (1, 0, 0)
    assert next_step(result, 1) is Step.RESTART and next_step(result, 0) is Step.FINISH
    same = LaunchResult((grown, Attempt(two)))  # started again with as many: no grow
    assert (same.grows, len(same.restarts), same.port_retries) == (0, 0, 0)


SCHEDULER = ProcessSpec("scheduler", 0, "127.0.0.1", ("node",), {})
SERVER = ProcessSpec("server", 0, "127.0.0.1", ("node",), {})
WORKER = ProcessSpec("worker", 0, "127.0.0.1", ("train",), {})
LOCAL = LaunchPlan(9000, (SCHEDULER, SERVER, WORKER))


class Polled:
    """A started process group as the monitor sees it: these exits, then nothing runs."""

    transport, children = LocalTransport(), []

    def __init__(self, *exits):
        self.exits = [Exited(spec, code, time.monotonic(), time.time()) for spec, code in exits]

    def poll(self):
        exits, self.exits = self.exits, []
        return exits

    def running(self):
        return []


def test_the_grow_exit_code_is_read_in_one_place_of_the_launcher():
    # the monitor and diagnose ask grow_end (stopped_to_grow); nothing else compares the code
    found = set()
    for path in (ROOT / "gluondist" / "launcher").rglob("*.py"):
        if "child" in path.parts:
            continue  # the workers' side: the bootstrap's own exit
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Attribute) and node.attr == "RESIZED" or \
                            isinstance(node, ast.Attribute) and node.attr == "EXIT" and \
                            isinstance(node.value, ast.Name) and node.value.id == "elastic":
                        found.add((path.stem, fn.name))
    assert found == {("outcome", "grow_end")}


@pytest.mark.parametrize("asked", [True, False])
def test_the_monitor_and_diagnose_read_a_grow_exit_alike(asked):
    resizing = threading.Event()
    if asked:
        resizing.set()
    group = Polled((WORKER, wire.RESIZED))
    ending = watch(LOCAL, group, Joins(lambda spec, line: None), 60.0, resizing=resizing)
    assert (ending.why, ending.label) == ((Why.DONE, "") if asked else (Why.EXITED, "worker 0"))
    ends = [ProcessEnd(s.label, s.role, s.host, code, time.time())
            for s, code in ((SCHEDULER, 0), (SERVER, 0), (WORKER, wire.RESIZED))]
    attempt = diagnose(LOCAL, ending, Teardown(), ends, asked_to_resize=asked)
    if asked:
        assert (attempt.resized, attempt.failure, attempt.ended) == (True, None, "stopped to grow")
    else:
        assert not attempt.resized
        assert (attempt.failure.kind, attempt.failure.label, attempt.exit_code) == \
            (Kind.EXIT, "worker 0", wire.RESIZED)


def test_a_server_that_exits_with_the_grow_code_failed_even_when_asked():
    resizing = threading.Event()
    resizing.set()
    ending = watch(LOCAL, Polled((SERVER, wire.RESIZED)), Joins(lambda spec, line: None), 60.0,
                   resizing=resizing)
    assert (ending.why, ending.label) == (Why.EXITED, "server 0")


def test_a_worker_the_grow_request_killed_is_not_blamed():
    # a worker that died of the launcher's own signal after it asked: the attempt stopped to
    # grow, said plainly; unasked, the same death is the worker's failure as before
    plan = LaunchPlan(9000, (SCHEDULER, SERVER, WORKER, ProcessSpec("worker", 1, "h", ("t",),
                                                                    {})))
    ends = (ProcessEnd("scheduler", "scheduler", "h", None),
            ProcessEnd("server 0", "server", "h", None),
            ProcessEnd("worker 0", "worker", "h", None),
            ProcessEnd("worker 1", "worker", "h", -int(elastic.SIGNAL), wall=5.0))
    ending = Ending(Why.EXITED, "worker 1", time=5.0)
    torn = Teardown(("scheduler", "server 0", "worker 0"))
    attempt = diagnose(plan, ending, torn, ends, asked_to_resize=True)
    assert (attempt.failure, attempt.resized, attempt.cut_short) == (None, True, ("worker 1",))
    assert attempt.ended == "stopped to grow"
    unasked = diagnose(plan, ending, torn, ends)
    assert (unasked.failure.label, unasked.failure.kind, unasked.resized) == \
        ("worker 1", Kind.SIGNAL, False)



# A server that aborts (SIGABRT) has no traceback: the report names the reason dmlc printed in
# its log, as for any role. These are a real server's last lines when two workers pushed one
# key with two shapes (MXNet 1.9.1: `kv.push(3, ones((4,) if rank == 0 else (5,)))`).
ABORT = ("[23:00:27] ../3rdparty/ps-lite/src/van.cc:257: S[8] is connected to others",
         "terminate called after throwing an instance of 'dmlc::Error'",
         "  what():  [23:00:27] ../src/ndarray/./ndarray_function.h:41: Check failed: lshape == "
         "rshape: operands shape mismatch", "")
CAUSE = "Check failed: lshape == rshape: operands shape mismatch"


def test_an_aborted_servers_report_names_the_reason_dmlc_gave():
    from gluondist.launcher.report import final_lines
    ends = [end("scheduler", "scheduler", -15, 9.0), end("server 0", "server", -6, 5.0,
                                                         tail=ABORT),
            end("worker 0", "worker", -15, 9.0), end("worker 1", "worker", -15, 9.0)]
    attempt = diagnose(PLAN, Ending(Why.EXITED, "server 0", time=5.0),
                       Teardown(("scheduler", "worker 0", "worker 1")), ends)
    assert (attempt.failure.label, attempt.failure.cause, attempt.exit_code) == (
        "server 0", CAUSE, 134)
    lines = final_lines(LaunchResult((attempt,)))
    assert lines[0] == f"gluondist: server 0 on h failed first: killed by SIGABRT: {CAUSE}"
    assert lines[-1] == "gluondist: exit code 134"


def test_a_later_failure_that_aborted_is_named_with_its_reason_too():
    from gluondist.launcher.report import failure_lines
    record = {"time": 1.0, "traceback": ["Traceback (most recent call last):",
                                         "MXNetError: Check failed: from.shape() == to.shape()"]}
    ends = [end("worker 1", "worker", 1, 2.0, record,
                tail=("MXNetError: Check failed: from.shape() == to.shape()",)),
            end("server 0", "server", -6, 2.5, tail=ABORT), end("worker 0", "worker", -15, 9.0)]
    # the server's abort noticed first, the worker's exception recorded before it (the run's)
    attempt = diagnose(PLAN, Ending(Why.EXITED, "server 0", time=2.5), Teardown(("worker 0",)),
                       ends)
    lines = failure_lines(attempt)
    assert lines[0] == ("gluondist: worker 1 on h failed first: exit code 1: Check failed: "
                        "from.shape() == to.shape()")
    assert f"gluondist: then server 0 on h failed: killed by SIGABRT: {CAUSE}" in lines


@pytest.mark.parametrize("tail,cause", [
    (ABORT, CAUSE),
    (("[10:00:00] ../src/kvstore/kvstore_dist_server.h:300: Error: no such key 3", "bye"),
     "Error: no such key 3"),
    (("terminate called without an active exception",), ""),  # said nothing of why
    (("[10:00:00] ../3rdparty/ps-lite/src/van.cc:1: Bind to role=server",), ""),
    (("what():  " + "x" * 300,), "x" * 197 + "..."),
])
def test_the_reason_is_dmlcs_last_word_trimmed_to_one_line(tail, cause):
    from gluondist.launcher.pslite import dmlc_reason
    assert dmlc_reason(tail) == cause
