"""`gluondist launch` with real processes and real MXNet on loopback. What needs no MXNet (a
worker's exception and its report, the earliest failure first, the Python API's result,
signals to the launcher, its death and a console that cannot take a line) is tested fast
through the fake backend: launcher/test_control_loop.py, launcher/test_command.py."""
import os
import signal
import sys
import time

import pytest

from conftest import SCRIPTS, kill_tagged, tagged_pids, wait_until

JOB = str(SCRIPTS / "job.py")


def role_pids(tag, role):
    pids = []
    for pid in tagged_pids(tag):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"DMLC_ROLE={role}".encode() in f.read().split(b"\0"):
                    pids.append(pid)
        except OSError:
            pass
    return pids


def test_a_job_that_succeeds(launch, tmp_path):
    job = launch("-n", 2, "-s", 1, "--log-dir", "logs", "--threads", 1, JOB, "ok",
                 env={"OMP_NUM_THREADS": "4"})
    assert job.wait() == 0, job.err
    # --threads wins over the OMP_NUM_THREADS the launcher itself has
    assert "[worker 0] worker 0 on 127.0.0.1 pulled 3 (OMP_NUM_THREADS=1)" in job.out
    assert "[worker 1] worker 1 on 127.0.0.1 pulled 3 (OMP_NUM_THREADS=1)" in job.out
    assert sorted(os.listdir(tmp_path / "logs")) == [
        "scheduler.log", "server.0.log", "worker.0.log", "worker.1.log"]
    assert "worker 1 on 127.0.0.1 pulled" in (tmp_path / "logs" / "worker.1.log").read_text()
    assert {p.name for p in tmp_path.glob("*.done")} == {"0.done", "1.done"}
    assert "ps-lite" not in job.out  # its routine chatter stays in the log files
    assert job.leftovers() == []


def test_ps_verbose_0_does_not_hide_that_the_job_formed(launch, tmp_path):
    # The workers run past --start-timeout: a launcher that learns of joins only from the
    # messages PS_VERBOSE=0 silences would stop a healthy job there ("did not form"). From the
    # environment or from --env alike: unit/test_plan.py checks both reach the plan the same way.
    # (a job forms within 15 s even on a loaded 2-core machine; at 8 s it did not, at load 7)
    job = launch("-n", 2, "-s", 1, "--start-timeout", 15, "--log-dir", "logs", JOB, "linger",
                 "all", time.time() + 16, env={"PS_VERBOSE": "0"})
    assert job.wait() == 0, job.err
    assert {p.name for p in tmp_path.glob("*.done")} == {"0.done", "1.done"}
    assert "ps-lite" not in job.out  # the user's 0 keeps the console quiet ...
    assert "Bind to role=worker" in (tmp_path / "logs" / "worker.1.log").read_text()  # ... logs
    assert job.leftovers() == []


def test_two_launchers_started_together_do_not_collide(launch, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    jobs = [launch("-n", 2, "-s", 1, "--log-dir", d, "--", sys.executable, JOB, "ok")
            for d in ("a", "b")]
    assert [job.wait() for job in jobs] == [0, 0], [job.err for job in jobs]
    ports = {(tmp_path / d / "scheduler.log").read_text().split("port=")[1].split(",")[0]
             for d in ("a", "b")}
    assert len(ports) == 2  # each owns its scheduler port
    assert all(job.leftovers() == [] for job in jobs)


def test_server_killed(launch, tmp_path):
    job = launch("-n", 2, "-s", 1, JOB, "hang", "all")
    wait_until(lambda: len(list(tmp_path.glob("*.hanging"))) == 2, message="the job to run")
    os.kill(role_pids(job.tag, "server")[0], signal.SIGKILL)
    assert job.wait() == 128 + signal.SIGKILL
    assert "server 0 failed first: killed by SIGKILL" in job.err
    assert job.leftovers() == []


def test_script_arguments_that_look_like_ours_pass_through(launch):
    job = launch("-n", 1, "-s", 1, JOB, "argv", "-n", "8", "--log-dir", "x")
    assert job.wait() == 0, job.err
    assert "[worker 0] ARGV ['argv', '-n', '8', '--log-dir', 'x']" in job.out


def test_any_command_after_a_double_dash(launch, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(
        "import os, sys\nprint('module', os.environ['GLUONDIST_RANK'], sys.argv[1:])\n"
        "sys.exit(int(sys.argv[1]))\n")
    job = launch("-n", 2, "-s", 1, "--", sys.executable, "-m", "pkg.train", "0")
    assert job.wait() == 0, job.err
    assert "[worker 1] module 1 ['0']" in job.out
    failing = launch("-n", 2, "-s", 1, "--", sys.executable, "-m", "pkg.train", "5")
    assert failing.wait() == 5


@pytest.mark.parametrize("args,message", [
    (["missing.py"], "script 'missing.py' not found"),
    (["-n", "0", JOB], "-n/--num-workers must be a whole number, at least 1"),
    (["-s", "0", JOB], "a parameter-server job needs a server"),
    (["-s", "-1", JOB], "-s/--num-servers must be a whole number, at least 1"),
    (["--kvstore", "local", JOB], "--kvstore 'local' is not a distributed kind"),
    (["--log-dir", "/proc/nope", JOB], "--log-dir '/proc/nope' cannot be created"),
    (["--env", "NOVALUE", JOB], "write KEY=VALUE"),
    (["--max-restarts", "-1", JOB], "--max-restarts must be 0 or more"),
    (["-n", "two", JOB], "-n 'two': give N, or MIN:MAX for an elastic job (whole numbers)"),
    (["--", "no-such-command-xyz"], "command 'no-such-command-xyz' not found"),
    (["-n", "2", "--gpus-per-worker", "2", JOB], "needs 4 GPU(s); this machine has 0"),
    (["--stall-timeout", "0", JOB], "--stall-timeout"),
    ([], "Missing argument"),
])
def test_bad_input_is_one_line_and_exit_2(launch, args, message):
    job = launch(*args)
    assert job.wait(timeout=30) == 2
    lines = job.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], job.err
    assert job.out == ""


def test_a_log_file_that_cannot_be_written_stops_the_launch_before_anything_starts(launch,
                                                                                  tmp_path):
    (tmp_path / "logs" / "worker.1.log").mkdir(parents=True)  # unwritable even for root
    job = launch("-n", 2, "-s", 1, "--log-dir", "logs", JOB, "ok")
    assert job.wait(timeout=30) == 2
    lines = job.err.strip().splitlines()
    assert lines[-1] == ("gluondist: error: log file 'logs/worker.1.log' cannot be written (a "
                         "directory); remove it or give another --log-dir"), job.err
    assert "Traceback" not in job.err
    assert os.listdir(tmp_path / "logs") == ["worker.1.log"]  # no other log even opened
    assert job.leftovers() == []


def test_a_taken_scheduler_port_is_retried_on_another(tmp_path):
    import socket
    import uuid

    from conftest import TAG
    from gluondist.launcher.options import LaunchOptions
    from gluondist.launcher.ports import free_ports
    from gluondist.launcher.supervisor import launch_job

    tag = uuid.uuid4().hex
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        calls = []

        def ports(count, host):
            fresh = free_ports(count, host)
            calls.append(fresh)
            return [taken.getsockname()[1], *fresh[1:]] if len(calls) == 1 else fresh

        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            options = LaunchOptions((JOB, "ok"), 1, 1, env={TAG: tag})
            result = launch_job(options, lambda text, note: None, ports=ports)
        finally:
            os.chdir(cwd)
            stray = kill_tagged(tag)
    assert (result.exit_code, len(result.attempts)) == (0, 2), result.failure
    assert result.attempts[0].failure.reason.startswith("its port was taken (exit code 98")
    assert (tmp_path / "0.done").exists()
    assert stray == []


def test_from_python_the_console_shows_what_the_cli_shows(tmp_path, monkeypatch, capsys):
    import uuid

    import gluondist
    from conftest import TAG

    tag = uuid.uuid4().hex
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PS_VERBOSE", raising=False)
    try:
        result = gluondist.launch(JOB, "ok", num_workers=2, num_servers=1, env={TAG: tag})
    finally:
        stray = kill_tagged(tag)
    out, err = capsys.readouterr()
    assert result.exit_code == 0
    assert "[worker 1] worker 1 on 127.0.0.1 pulled 3" in out
    assert "ps-lite" not in out and "Barrier count" not in out  # chatter is not shown ...
    assert any("ps-lite" in line for line in result.logs["scheduler"])  # ... but kept
    assert "gluondist: OMP_NUM_THREADS=" in err  # the plan's notes, as the CLI says them
    assert stray == []


def test_a_script_imports_its_sibling_modules_as_python_would(launch, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "helper.py").write_text("VALUE = 42\n")
    (code / "train.py").write_text("import sys\nfrom helper import VALUE\n"
                                   "print('helper says', VALUE, sys.argv)\n")
    job = launch("-n", 1, "-s", 1, code / "train.py", "--x")  # run from tmp_path, not code/
    assert job.wait() == 0, job.err
    assert f"[worker 0] helper says 42 ['{code / 'train.py'}', '--x']" in job.out


def test_blank_last_lines_are_left_out_of_a_report(launch):
    job = launch("-n", 1, "-s", 1, "--", sys.executable, "-c",
                 "print('\\n\\nlast words\\n\\n'); raise SystemExit(3)")
    assert job.wait() == 3
    lines = job.err.splitlines()
    body = lines[lines.index("gluondist: its last lines:") + 1:]
    assert body[0] == "    last words" and not body[1].startswith("    "), job.err
