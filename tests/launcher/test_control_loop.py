"""The launcher's control loop, fast: every transition (success, a worker's exit, signal or
exception, a lost host, a stall, a start timeout, a taken port, a stop request, restarts and
the hosts left out of them) through a backend added in one module (fake_backend.py), whose
processes are tiny real ones without MXNet; what the report puts first and whole (the earliest
failure, a traceback longer than the log tail, also over ssh); and diagnose() and next_step()
on literal values. The real end-to-end jobs stay in the slow tier (e2e/test_launch.py,
e2e/test_teardown.py, ...)."""
import os
import re
import signal
import socket
import threading
import uuid

import pytest

import gluondist
from gluondist.launcher import stall, transports
from gluondist.launcher.errors import LaunchError, Stopped, StopRequest
from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.outcome import (Kind)
from gluondist.launcher.ports import free_ports
from conftest import HERE, tagged_pids, TAG
from fake_backend import WORKER, FakeSsh, run


@pytest.fixture
def first_port_taken():
    """A port a socket of the test holds, and a ``ports`` for run() that gives it as the
    scheduler's to the first attempt only (free ones to the others)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port, calls = taken.getsockname()[1], []

    def ports(count, host):
        calls.append(count)
        free = free_ports(count, host)
        return [port, *free[1:]] if len(calls) == 1 else free
    yield port, ports
    taken.close()


def test_a_backend_added_in_one_module_runs_a_job(tmp_path, fake):
    result = gluondist.launch(WORKER, "ok", num_workers=2, launcher="fake", hosts="h1:1,h2:1",
                              env={"FAKE_DIR": str(tmp_path)}, echo=False)
    assert (result.exit_code, len(result.attempts), result.last.workers) == (0, 1, 2)
    assert "worker 1 running ok" in result.logs["worker 1"]
    assert "fake" in transports.names()


def test_the_python_api_returns_the_result_and_logs(tmp_path, fake):
    tag = uuid.uuid4().hex
    result = gluondist.launch(WORKER, "exit", "3", "1", num_workers=2, launcher="fake",
                              hosts="h1:1,h2:1", env={"FAKE_DIR": str(tmp_path), TAG: tag},
                              echo=False)
    assert result.exit_code == 3
    assert (result.failure.label, result.failure.reason) == ("worker 1", "exit code 3")
    assert "worker 0 running exit" in result.logs["worker 0"]  # the one stopped, too
    assert tagged_pids(tag) == []


def test_an_unknown_backend_is_one_line():
    with pytest.raises(LaunchError, match="unknown launcher 'pbs'; use one of local, ssh, slurm"):
        LaunchOptions((WORKER,), launcher="pbs").validate()


@pytest.mark.parametrize("action,code,kind,reason", [
    (("exit", "3", "1"), 3, Kind.EXIT, "exit code 3"),
    (("kill", "SIGKILL", "1"), 128 + 9, Kind.SIGNAL,
     "killed by SIGKILL (often the out-of-memory killer: see `dmesg`)"),
    (("raise", "1"), 1, Kind.EXIT, "exit code 1"),
])
def test_a_failing_worker_is_named_first_and_the_rest_stopped(tmp_path, fake, action, code,
                                                              kind, reason):
    result, notes = run(tmp_path, *action)
    f = result.failure
    # ps-lite ranks hosts by descending address: worker 0 on h2, worker 1 on h1
    assert (result.exit_code, f.kind, f.label, f.host, f.reason) == (code, kind, "worker 1",
                                                                     "h1", reason)
    assert "worker 1 on h1 failed first: " + reason in notes[0]
    assert result.stopped == ("scheduler", "server 0", "worker 0")
    assert "gluondist: stopped scheduler, server 0, worker 0" in notes
    assert notes[-1] == f"gluondist: exit code {code}"
    if action[0] == "raise":
        assert f.from_error_file and f.traceback[-1] == "RuntimeError: worker 1 failed on purpose"
        report = "\n".join(notes).split("its traceback (from its error record):")[1]
        assert "RuntimeError: worker 1 failed on purpose" in report


def test_a_restart_runs_the_job_again_and_counts_only_restarts(tmp_path, fake):
    result, notes = run(tmp_path, "flaky", "3", "0", max_restarts=2)
    assert result.exit_code == 0 and len(result.attempts) == 2
    assert [f.label for f in result.restarts] == ["worker 0"]
    assert [a.exit_code for a in result.attempts] == [3, 0]
    assert "gluondist: restarting the job (1 of 2)" in notes
    assert notes[-1] == "gluondist: succeeded after 1 restart(s)"


def test_restarts_run_out_and_only_the_end_reads_like_one(tmp_path, fake):
    result, notes = run(tmp_path, "exit", "3", "1", max_restarts=1)
    assert result.exit_code == 3 and len(result.attempts) == 2 and len(result.restarts) == 1
    split = notes.index("gluondist: restarting the job (1 of 1)")
    first, last = notes[:split], notes[split + 1:]
    assert first[0] == "gluondist: attempt 1 failed: worker 1 on h1 failed first: exit code 3"
    assert not any("exit code" in line for line in first[1:])  # nothing reads like the end
    assert last[0] == "gluondist: worker 1 on h1 failed first: exit code 3"
    assert last[-2:] == ["gluondist: no restart left: all 1 of --max-restarts used",
                         "gluondist: exit code 3"]


def test_a_lost_host_is_named_and_left_out_of_the_restart(tmp_path, fake):
    fake.down = {"h1"}  # where worker 1 runs (and the scheduler and server)
    result, notes = run(tmp_path, "flaky", "255", "1", hosts="h1:1,h2:1,h3:1", max_restarts=1)
    assert result.exit_code == 0 and result.attempts[0].exit_code == 75
    assert result.restarts[0].kind is Kind.LOST_HOST
    assert "lost the connection to host h1, where scheduler, server 0, worker 1 ran" in notes[0]
    assert "gluondist: host h1 is unreachable (down): left out of attempt 2" in notes
    assert {s.host for s in result.plan.specs} == {"h2", "h3"}
    assert fake.checked == [(2, ("h1", "h2", "h3"))]


def test_a_restart_that_no_longer_fits_is_refused_in_one_line(tmp_path, fake):
    fake.down = {"h1"}
    result, notes = run(tmp_path, "exit", "255", "1", max_restarts=1)
    assert result.exit_code == 75 and len(result.attempts) == 1
    assert notes[-2] == ("gluondist: cannot restart: the hosts left have 1 slot(s) for -n 2; "
                         "-n is never lowered (it sets the global batch): bring the hosts "
                         "back, add some, or give -n MIN:MAX")
    assert notes[-1] == "gluondist: exit code 75 (lost a host)"


def test_a_taken_port_is_retried_on_another_and_is_no_restart(tmp_path, fake,
                                                              first_port_taken):
    port, ports = first_port_taken
    result, notes = run(tmp_path, "ok", hosts="127.0.0.1:2", ports=ports)
    assert result.exit_code == 0 and len(result.attempts) == 2 and result.restarts == ()
    assert result.attempts[0].failure.kind is Kind.PORT_TAKEN
    assert f"gluondist: the scheduler's port {port} was taken; retrying on another" in notes


def test_a_job_that_does_not_form_in_time_names_who_did_not_join(tmp_path, fake):
    result, notes = run(tmp_path, "nojoin", "1", start_timeout=1.5)
    assert result.exit_code == 1 and result.failure.kind is Kind.START_TIMEOUT
    # on a loaded machine the others may not have joined within 1.5 s either: worker 1 never
    assert re.fullmatch(r"gluondist: the job did not form within 1\.5s: (\S+ \d, )*worker 1 "
                        r"did not join \(never started a kvstore\); raise --start-timeout if "
                        r"start-up is just slow", notes[0]), notes[0]


def test_a_stall_stops_the_job_with_every_workers_stack(tmp_path, fake):
    result, notes = run(tmp_path, "hang", "0,1", stall_timeout=1.0)
    assert result.exit_code == 124 and result.failure.kind is Kind.STALL
    assert sorted(result.stall.stacks) == ["worker 0", "worker 1"]
    assert any("fake_worker.py" in line for line in result.stall.stacks["worker 0"])
    assert notes[-1] == "gluondist: exit code 124 (stalled)"


def test_a_worker_without_heartbeat_is_judged_by_its_cpu(tmp_path, fake):
    result, notes = run(tmp_path, "quiet", "1", stall_timeout=1.5)
    assert result.exit_code == 124  # worker 1 sleeps; worker 0 waits for it, idle too
    assert all(" (no heartbeat; CPU idle for " in w for w in result.stall.workers)
    assert any('fake_worker.py", line' in l for l in result.stall.stacks["worker 1"])


@pytest.mark.parametrize("action", [("beat", "3"), ("late", "3.5")])
def test_progress_or_a_slow_start_is_not_a_stall(tmp_path, fake, action):
    # heartbeats, or a start slower than the timeout (a data download: --start-timeout's
    # business, the stall clock starts once the job formed)
    result, notes = run(tmp_path, *action, stall_timeout=2.5)
    assert result.exit_code == 0, notes


def test_cpu_time_without_a_heartbeat_is_progress(tmp_path, fake, monkeypatch):
    # sampled every 0.25 s here (each second in a job): the timeout is over three samples,
    # and each worker is busy for twice the timeout
    monkeypatch.setattr(stall, "CPU_SAMPLE", 0.25)
    result, notes = run(tmp_path, "busy", "1.6", stall_timeout=0.8)
    assert result.exit_code == 0, notes


def test_a_stop_request_stops_every_process_and_is_raised(tmp_path, fake):
    stop = StopRequest()
    timer = threading.Timer(1.0, stop.request, (signal.SIGTERM,))
    timer.start()
    with pytest.raises(Stopped) as raised:
        run(tmp_path, "sleep", "600", stop=stop)
    assert raised.value.signum == signal.SIGTERM and raised.value.left == []


def test_the_earliest_failure_leads_even_when_noticed_later(tmp_path, fake):
    # worker 1 raises first but takes a second to format its error; worker 0 raises once
    # worker 1's formatting began (after its failure time was taken) and exits first, so the
    # monitor notices worker 0 first. The error records' times put worker 1 first.
    result, notes = run(tmp_path, "raisefirst", "1")
    said = "\n".join(notes)
    assert result.exit_code == 1 and result.failure.label == "worker 1", said
    assert "gluondist: worker 1 on h1 failed first: exit code 1" in said
    assert "SlowToFormat: worker 1 failed first" in said
    assert "gluondist: then worker 0 on h2 failed: RuntimeError: worker 0 saw a peer fail" in said
    stopped = [n for n in notes if n.startswith("gluondist: stopped")]
    assert not any("worker" in n for n in stopped), said  # each named once, as failed


def test_a_traceback_longer_than_the_log_tail_comes_whole_from_the_error_record(tmp_path,
                                                                                 fake):
    result, notes = run(tmp_path, "deep", "1")
    said = "\n".join(notes)
    assert result.exit_code == 1 and "worker 1 on h1 failed first: exit code 1" in said
    report = said.split("its traceback (from its error record):")[1].splitlines()
    assert report[1].strip() == "Traceback (most recent call last):"
    assert "in <module>" in report[2]
    assert sum(", in nested" in line for line in report) == 61  # more than the 40-line tail
    assert "ValueError: the real cause, 60 calls down" in said


# over the real ssh transport and remote side, with tests/bin/ssh standing in for ssh

@pytest.fixture
def fake_ssh(monkeypatch):
    monkeypatch.setenv("PATH", f"{HERE / 'bin'}{os.pathsep}{os.environ['PATH']}")
    backend = FakeSsh()
    transports.register(backend)
    yield backend
    transports.unregister(backend.name)


def test_over_ssh_a_workers_record_and_exit_are_relayed(tmp_path, fake_ssh):
    result, notes = run(tmp_path, "raise", "1", launcher="fakessh", hosts="a:1,b:1")
    f = result.failure
    assert (result.exit_code, f.label, f.host, f.from_error_file) == (1, "worker 1", "a", True)
    assert f.traceback[-1] == "RuntimeError: worker 1 failed on purpose"


def test_over_ssh_a_record_longer_than_the_log_tail_comes_back_whole(tmp_path, fake_ssh,
                                                                   monkeypatch):
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG, tag)  # ssh's and so the remote sides' own: none may outlive the job
    result, notes = run(tmp_path, "deep", "0", tag=tag, launcher="fakessh", hosts="a:1,b:1")
    said = "\n".join(notes)
    assert result.exit_code == 1 and "worker 0 on b failed first: exit code 1" in said
    assert "its traceback (from its error record):" in said
    assert sum(", in nested" in line for line in said.splitlines()) == 61


def test_over_ssh_a_name_gluondist_does_not_know_is_said_once_before_anything_starts(
        tmp_path, fake_ssh, monkeypatch):
    # A GLUONDIST_* or DMLC_* name of the launcher's environment that gluondist does not define
    # (a typo) stays behind over ssh: said once, first, and the job runs all the same
    monkeypatch.setenv("GLUONDIST_EXIT_GRAC", "5")
    monkeypatch.setenv("DMLC_PS_VAN_TYPE", "zmq")
    monkeypatch.setenv("GLUONDIST_EXIT_GRACE", "5")  # the job's setting: it travels
    result, notes = run(tmp_path, "ok", launcher="fakessh", hosts="a:1,b:1",
                        env={"GLUONDIST_MINE": "1"})  # --env's: the user's own, never told
    assert result.exit_code == 0
    assert notes[0] == ("gluondist: not sent to the remote hosts: DMLC_PS_VAN_TYPE, "
                        "GLUONDIST_EXIT_GRAC (not gluondist settings; a setting of your own "
                        "goes with --env NAME=VALUE)")
    assert [n for n in notes if "GLUONDIST_" in n] == notes[:1]


def test_over_ssh_a_cut_link_is_a_lost_host(tmp_path, fake_ssh, monkeypatch):
    monkeypatch.setenv("FAKE_CUT_AFTER", "1.5")
    result, notes = run(tmp_path, "sleep", "600", launcher="fakessh", hosts="a:1,cut:1")
    assert result.exit_code == 75 and result.failure.kind is Kind.LOST_HOST
    assert result.failure.host == "cut"


def test_over_ssh_an_unreachable_host_stops_the_start_in_one_line(tmp_path, fake_ssh):
    with pytest.raises(LaunchError, match="host down: ssh failed: ssh: connect to host down "
                                          "port 22: Connection refused"):
        run(tmp_path, "ok", launcher="fakessh", hosts="a:1,down:1")


# the pure parts, on literal values


# issue 36, defect 2: every attempt keeps its own logs, whatever ended the one before

def test_a_port_retry_keeps_each_attempts_log(tmp_path, fake, first_port_taken):
    logs = tmp_path / "logs"
    result, _ = run(tmp_path, "ok", hosts="127.0.0.1:2", ports=first_port_taken[1],
                    log_dir=str(logs))
    assert len(result.attempts) == 2 and result.attempts[0].failure.kind is Kind.PORT_TAKEN
    assert sorted(p.name for p in logs.glob("scheduler*")) == ["scheduler.log",
                                                               "scheduler.restart1.log"]
    assert "worker 0 running ok" in (logs / "worker.0.restart1.log").read_text()
    # the first attempt's, kept: its job never formed (the retry's would say it ran)
    assert "worker 0 running ok" not in (logs / "worker.0.log").read_text()
