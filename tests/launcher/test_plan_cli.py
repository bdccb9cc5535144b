"""The plan as `gluondist launch` shows and uses it: dry runs, commands that are not scripts,
another virtualenv's python, and options from their environment variables with the command
line winning (the plan alone: unit/test_plan.py)."""
import sys

from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.plan import build_plan
from conftest import SCRIPTS, run_cli


JOB = str(SCRIPTS / "job.py")


def test_a_bad_value_from_an_environment_variable_is_one_line_naming_the_option():
    proc = run_cli("launch", "--dry-run", JOB, env={"GLUONDIST_START_TIMEOUT": "0"})
    assert proc.returncode == 2
    said = proc.stderr.strip().splitlines()
    # click 8.2 and later (Python 3.10 and later) also name the variable
    named = " (env var: 'GLUONDIST_START_TIMEOUT')" if "(env var:" in said[-1] else ""
    assert said == ["gluondist: error: Invalid value for '--start-timeout'" + named +
                    ": 0.0 is not in the range x>0."]


def test_another_virtualenvs_python_runs_as_it_is(tmp_path):
    # a venv's python links to its base interpreter, as this one's may: another environment's
    # packages, not the launcher's, so no bootstrap (which would be run by this python)
    import venv
    from gluondist.launcher.roles import worker_argv
    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "other")
    other = str(tmp_path / "other" / "bin" / "python")
    assert worker_argv((other, "-m", "pkg.train"), sys.executable) == (other, "-m", "pkg.train")


def test_commands_that_are_not_scripts():
    module = build_plan(LaunchOptions((sys.executable, "-m", "pkg.train", "a"),
                                      python=sys.executable), 1, (), 1, {})
    assert module.of_role("worker")[0].argv == (
        sys.executable, "-m", "gluondist.launcher.child.bootstrap", "-m", "pkg.train", "a")
    other = build_plan(LaunchOptions(("env", "true"), python=sys.executable), 1, (), 1, {})
    assert other.of_role("worker")[0].argv == ("env", "true")


def test_dry_run_prints_every_process_and_starts_none(tmp_path):
    proc = run_cli("launch", "--dry-run", "-n", "2", "-s", "1", JOB, "--flag")
    assert proc.returncode == 0, proc.stderr
    heads = [l for l in proc.stdout.splitlines() if not l.startswith(" ")]
    assert [h.split(" on ")[0] for h in heads] == ["scheduler", "server 0", "worker 0", "worker 1"]
    assert heads[2].endswith(f"-m gluondist.launcher.child.bootstrap {JOB} --flag")
    assert "    DMLC_ROLE=worker" in proc.stdout and "    GLUONDIST_RANK=1" in proc.stdout


def test_dry_run_shows_what_starting_adds_and_quotes_values_for_a_shell():
    proc = run_cli("launch", "--dry-run", "-n", "1", "-s", "1", "--stall-timeout", "60",
                   "--env", "NOTE=two\nlines", "--env", "SPACED=a b", JOB)
    assert proc.returncode == 0, proc.stderr
    worker = proc.stdout.split("worker 0 on ")[1]
    assert "    GLUONDIST_ERROR_FILE=<a file in the launcher's temporary directory>" in worker
    assert "    GLUONDIST_PROGRESS_FD=<a pipe's write end, for the heartbeats>" in worker
    assert "    NOTE=$'two\\nlines'" in worker and "    SPACED='a b'" in worker
    assert all(l.startswith("    ") or " on " in l for l in proc.stdout.splitlines())


def test_a_name_gluondist_does_not_know_is_one_note_and_the_dry_run_goes_on():
    # GLUONDIST_EXIT_GRAC is a typo: over ssh it stays behind (so would DMLC_*, which a local
    # job's processes inherit for ps-lite); on any launcher gluondist reads no such name.
    # The job's settings, PS_* and --env's names are never told.
    env = {"GLUONDIST_EXIT_GRAC": "5", "DMLC_PS_VAN_TYPE": "zmq", "GLUONDIST_EXIT_GRACE": "5",
           "PS_RESEND": "1", "GLUONDIST_MINE": "1"}
    ssh = run_cli("launch", "--dry-run", "--launcher", "ssh", "-H", "a:1,b:1",
                  "--env", "GLUONDIST_MINE=2", JOB, env=env)
    assert ssh.returncode == 0, ssh.stderr
    assert ssh.stderr.splitlines() == [
        "gluondist: not sent to the remote hosts: DMLC_PS_VAN_TYPE, GLUONDIST_EXIT_GRAC (not "
        "gluondist settings; a setting of your own goes with --env NAME=VALUE)"]
    assert "\nworker 0 on " in ssh.stdout  # the plan, printed all the same
    local = run_cli("launch", "--dry-run", "--env", "GLUONDIST_MINE=2", JOB, env=env)
    assert local.returncode == 0, local.stderr
    assert local.stderr.splitlines() == [
        "gluondist: not a gluondist setting: GLUONDIST_EXIT_GRAC (gluondist reads no such "
        "name: check the spelling against docs/environment.md)"]


def test_one_builder_for_every_role_and_the_kubernetes_index():
    from gluondist.launcher.roles import role_env, role_of_index, worker_argv
    assert [role_of_index(i, 2) for i in range(5)] == [
        ("scheduler", 0), ("server", 0), ("server", 1), ("worker", 0), ("worker", 1)]
    assert role_env("worker", 1, "dist_async", 2) == {
        "DMLC_ROLE": "worker", "GLUONDIST_RANK": "1", "GLUONDIST_KVSTORE": "dist_async",
        "GLUONDIST_RESTART_COUNT": "2", "PYTHONUNBUFFERED": "1"}
    assert role_env("server", 0, "dist_sync") == {"DMLC_ROLE": "server"}
    # `<this python> SCRIPT.py` runs under the bootstrap too (the Kubernetes pod's case)
    assert worker_argv((sys.executable, "t.py", "-x"), sys.executable) == (
        sys.executable, "-m", "gluondist.launcher.child.bootstrap", "t.py", "-x")
    assert worker_argv(("/bin/sh", "t.py"), sys.executable) == ("/bin/sh", "t.py")


def test_options_come_from_their_environment_variables_and_the_command_line_wins():
    # GLUONDIST_ENV's pairs are space-separated (click splits a repeatable option's variable)
    env = {"GLUONDIST_ENV": "FROM_ENV=1 ALSO=a=b", "GLUONDIST_THREADS": "3",
           "GLUONDIST_NUM_WORKERS": "2"}
    proc = run_cli("launch", "--dry-run", JOB, env=env)
    assert proc.returncode == 0, proc.stderr
    worker = proc.stdout.split("worker 1 on ")[1]
    assert "    FROM_ENV=1" in worker and "    ALSO=a=b" in worker
    assert "    OMP_NUM_THREADS=3" in worker
    proc = run_cli("launch", "--dry-run", "--env", "GIVEN=2", "--threads", "2", JOB, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "FROM_ENV" not in proc.stdout and "    GIVEN=2" in proc.stdout
    assert "    OMP_NUM_THREADS=2" in proc.stdout.split("worker 0 on ")[1]

