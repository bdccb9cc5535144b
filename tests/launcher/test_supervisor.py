"""The pieces the launcher's supervisor is made of, fast and without MXNet: the one rule for a
worker's exit after a grow request (asked by both the monitor and diagnose), the Transport
base class's defaults (which every transport inherits), the console, and the Supervisor's
loop itself with its ``attempt`` replaced by literal outcomes (as torchrun's api_test.py
subclasses its agent)."""
import signal
import subprocess
import sys

import pytest

from gluondist import elastic, wire
from gluondist.launcher.console import Console
from gluondist.launcher.errors import Stopped, StopRequest
from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.outcome import (Attempt, Failure, Kind, GrowEnd, grow_end,
                                        stopped_to_grow)
from gluondist.launcher.plan import ProcessSpec
from gluondist.launcher.process import ProcessGroup
from gluondist.launcher.supervisor import Supervisor, resolve
from gluondist.launcher.transports import Transport, backend
from gluondist.launcher.transports.local import LocalTransport
from gluondist.launcher.transports.slurm import SrunTransport
from gluondist.launcher.transports.ssh import SshTransport
from fake_backend import FakeSshTransport, FakeTransport

WORKER = ProcessSpec("worker", 0, "127.0.0.1", ("train",), {})


def test_only_a_workers_grow_exit_after_the_request_is_a_stop_to_grow():
    assert elastic.EXIT == wire.RESIZED == 79
    assert stopped_to_grow("worker", wire.RESIZED, asked=True)
    assert not stopped_to_grow("worker", wire.RESIZED, asked=False)  # unasked: a failure
    assert not stopped_to_grow("server", wire.RESIZED, asked=True)
    assert not stopped_to_grow("scheduler", wire.RESIZED, asked=True)
    assert not stopped_to_grow("worker", 0, asked=True)
    assert not stopped_to_grow("worker", None, asked=True)  # not exited
    assert not stopped_to_grow("worker", -signal.SIGKILL, asked=True)
    # killed by the request itself (as Popen and as the ssh remote side report it): cut short
    for code in (-elastic.SIGNAL, 128 + elastic.SIGNAL):
        assert grow_end("worker", code, asked=True) is GrowEnd.CUT_SHORT
        assert not stopped_to_grow("worker", code, asked=True)
        assert grow_end("worker", code, asked=False) is None  # unasked: the worker's failure
        assert grow_end("server", code, asked=True) is None
    assert grow_end("worker", wire.RESIZED, asked=True) is GrowEnd.STOPPED


class Minimal(Transport):
    """A transport that implements only what it must."""

    def spawn(self, spec, progress=False, error_file=None):
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                start_new_session=True, stdout=subprocess.PIPE), None

    def request_stack(self, proc):
        pass

    def request_resize(self, proc):
        pass


def test_a_transports_defaults_are_a_local_process_without_a_side_channel():
    t = Minimal()
    assert (t.error_records, t.tree_cpu_known, t.silence, t.stop_slack) == (False, False, 0.0,
                                                                             0.0)
    assert t.tree_cpu(object()) is None and t.lost(object()) is False
    proc, side = t.spawn(WORKER)
    try:
        t.stop(proc)  # by default: SIGTERM to its tree
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    with pytest.raises(NotImplementedError):
        Transport().spawn(WORKER)


def test_every_transport_is_a_transport_and_ssh_has_its_own_stop():
    for transport in (LocalTransport(), SrunTransport(), SshTransport("python", {}, "/"),
                      FakeTransport(), FakeSshTransport("python", {}, "/")):
        assert isinstance(transport, Transport), transport
    assert SshTransport.stop is not Transport.stop and SshTransport.stop_slack == 2.0
    assert LocalTransport.stop is Transport.stop and LocalTransport.stop_slack == 0.0


def test_the_teardown_stops_each_process_through_its_transport():
    class Recording(LocalTransport):
        def __init__(self):
            self.stopped = []

        def stop(self, proc):
            self.stopped.append(proc.pid)
            super().stop(proc)

    transport = Recording()
    spec = ProcessSpec("worker", 0, "127.0.0.1",
                       (sys.executable, "-c", "import time; time.sleep(60)"), {})
    group = ProcessGroup([spec], None, transport=transport)
    try:
        group.start()
    finally:
        teardown = group.close(timeout=30)
    child = group.children[0]
    assert transport.stopped == [child.proc.pid]
    assert (teardown.stopped, child.proc.returncode) == (("worker 0",), -signal.SIGTERM)


class Scripted(Supervisor):
    """The real loop; each attempt is the next literal outcome instead of processes."""

    def __init__(self, outcomes, max_restarts=0, stop=None):
        job = resolve(LaunchOptions((sys.executable, "-c", "pass"), num_workers=2,
                                    max_restarts=max_restarts), {})
        self.shown, self.started, self.outcomes = [], [], list(outcomes)
        numbers = iter(range(20000, 30000))  # never bound: no attempt starts a process
        super().__init__(job, job, backend("local"), LocalTransport(),
                         Console(lambda text, note: self.shown.append(text)), stop=stop,
                         base_env={}, cores=4,
                         ports=lambda count, host: [next(numbers) for _ in range(count)])

    def attempt(self, plan, number):
        self.started.append((plan.port, number, len(plan.of_role("worker"))))
        return Attempt(plan, self.outcomes.pop(0))


def _failure(kind, label, status):
    return Failure(kind, f"exit code {status}", label, "127.0.0.1", status=status)


def test_the_supervisor_retries_a_taken_port_restarts_a_failure_then_finishes():
    taken = _failure(Kind.PORT_TAKEN, "scheduler", wire.PORT_TAKEN)
    supervisor = Scripted([taken, _failure(Kind.EXIT, "worker 1", 3), None], max_restarts=1)
    result = supervisor.run()
    assert (result.exit_code, len(result.attempts), len(result.restarts)) == (0, 3, 1)
    # each attempt on fresh ports (4: scheduler, server, two workers), numbered by its index
    # (the port retry too: its logs must not overwrite the first's); one restart counted above
    assert supervisor.started == [(20000, 0, 2), (20004, 1, 2), (20008, 2, 2)]
    assert "gluondist: the scheduler's port 20000 was taken; retrying on another" in \
        supervisor.shown
    assert "gluondist: restarting the job (1 of 1)" in supervisor.shown
    assert supervisor.shown[-1] == "gluondist: succeeded after 1 restart(s)"
    assert result.logs is supervisor.logs


def test_the_supervisor_finishes_with_the_failure_when_no_restart_is_left():
    supervisor = Scripted([_failure(Kind.EXIT, "worker 1", 3)])
    result = supervisor.run()
    assert (result.exit_code, len(result.attempts)) == (3, 1)
    assert supervisor.shown[-1] == "gluondist: exit code 3"
    assert supervisor.outcomes == []


def test_a_stop_requested_before_an_attempt_starts_none():
    stop = StopRequest()
    stop.request(signal.SIGTERM)
    supervisor = Scripted([None], stop=stop)
    with pytest.raises(Stopped) as raised:
        supervisor.run()
    assert (raised.value.signum, supervisor.started) == (signal.SIGTERM, [])


