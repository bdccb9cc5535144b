"""The launch plan, built in this process: every role's command and environment, what the
user set wins, ps-lite's join lines, the thread rule, and an unknown option in one line (the
plan as the command shows it: launcher/test_plan_cli.py)."""

import pytest

from gluondist.launcher.errors import LaunchError
from gluondist.launcher.hosts import Host
from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.plan import ProcessSpec, build_plan
from conftest import SCRIPTS

PY = "/usr/bin/python3.11"
JOB = str(SCRIPTS / "job.py")
COMMON = {"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9000", "DMLC_NUM_WORKER": "2",
          "DMLC_NUM_SERVER": "1", "DMLC_NODE_HOST": "127.0.0.1", "PS_VERBOSE": "1"}
BOOT = (PY, "-m", "gluondist.launcher.child.bootstrap")
BULK = "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD"  # the workers' default 0: see envvars


def test_plan_for_two_workers_and_one_server():
    options = LaunchOptions((JOB, "-n", "8"), 2, 1, python=PY, env={"X": "1"})
    plan = build_plan(options, 9000, [9103, 9101, 9102], cores=4, base_env={})
    assert plan.port == 9000
    assert plan.specs == (
        ProcessSpec("scheduler", 0, "127.0.0.1", (PY, "-m", "gluondist.launcher.child.server"),
                    {**COMMON, "DMLC_ROLE": "scheduler", "OMP_NUM_THREADS": "1", "X": "1"}),
        ProcessSpec("server", 0, "127.0.0.1", (PY, "-m", "gluondist.launcher.child.server"),
                    {**COMMON, "DMLC_ROLE": "server", "OMP_NUM_THREADS": "1", "PORT": "9101",
                     "X": "1"}),
        ProcessSpec("worker", 0, "127.0.0.1", (*BOOT, JOB, "-n", "8"),
                    {**COMMON, "DMLC_ROLE": "worker", "GLUONDIST_RANK": "0",
                     "GLUONDIST_KVSTORE": "dist_sync", "GLUONDIST_RESTART_COUNT": "0",
                     "PYTHONUNBUFFERED": "1", "PORT": "9102", BULK: "0",
                     "OMP_NUM_THREADS": "2", "X": "1"}),
        ProcessSpec("worker", 1, "127.0.0.1", (*BOOT, JOB, "-n", "8"),
                    {**COMMON, "DMLC_ROLE": "worker", "GLUONDIST_RANK": "1",
                     "GLUONDIST_KVSTORE": "dist_sync", "GLUONDIST_RESTART_COUNT": "0",
                     "PYTHONUNBUFFERED": "1", "PORT": "9103", BULK: "0",
                     "OMP_NUM_THREADS": "2", "X": "1"}),
    )
    assert plan.notes == ("OMP_NUM_THREADS=2 for each of 2 worker(s) on 4 core(s); "
                          "set OMP_NUM_THREADS to override",)
    assert [s.log_name for s in plan.specs] == [
        "scheduler.log", "server.0.log", "worker.0.log", "worker.1.log"]


def test_what_the_user_set_wins():
    options = LaunchOptions((JOB,), 2, 1, kvstore="dist_async", python=PY)
    plan = build_plan(options, 9000, (), cores=2,
                      base_env={"OMP_NUM_THREADS": "7", "PS_VERBOSE": "2"})
    for spec in plan.specs:
        assert "OMP_NUM_THREADS" not in spec.env and spec.env["PS_VERBOSE"] == "2"
        assert "PORT" not in spec.env
    assert plan.of_role("worker")[0].env["GLUONDIST_KVSTORE"] == "dist_async"
    assert plan.notes == ()
    few_cores = build_plan(LaunchOptions((JOB,), 4, 1, python=PY), 1, (), 2, {})
    assert {s.env["OMP_NUM_THREADS"] for s in few_cores.of_role("worker")} == {"1"}


@pytest.mark.parametrize("base_env,env,gpus", [
    ({BULK: "15"}, {}, 0), ({}, {BULK: "4"}, 0),
    ({"MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN": "8"}, {}, 0),  # MXNet's fallback for BULK
    ({}, {"MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN": "8"}, 0), ({}, {}, 1)])
def test_the_users_backward_bulking_wins_over_the_workers_default(base_env, env, gpus):
    options = LaunchOptions((JOB,), 2, 1, python=PY, env=env, gpus_per_worker=gpus)
    plan = build_plan(options, 1, (), 2, base_env)
    # from the environment: inherited (local) or carried as a job setting (ssh), not replaced;
    # with GPUs MXNet's bulking stays (it saves kernel launches; unmeasured without)
    assert [s.env.get(BULK) for s in plan.specs] == [env.get(BULK)] * 4


@pytest.mark.parametrize("base_env,env", [({"PS_VERBOSE": "0"}, {}), ({}, {"PS_VERBOSE": "0"}),
                                          ({"PS_VERBOSE": "2"}, {"PS_VERBOSE": "no"})])
def test_pslite_always_says_who_joined_whatever_the_user_set(base_env, env):
    # The monitor learns of joins from ps-lite's level-1 messages: PS_VERBOSE=0, from the
    # environment or from --env, must not silence them (it only keeps the console quiet).
    plan = build_plan(LaunchOptions((JOB,), 2, 1, python=PY, env=env), 1, (), 2, base_env)
    assert {s.env["PS_VERBOSE"] for s in plan.specs} == {"1"}


@pytest.mark.parametrize("base_env,env,hosts", [
    ({"OMP_NUM_THREADS": "4"}, {}, ()), ({}, {"OMP_NUM_THREADS": "4"}, ()),
    ({"OMP_NUM_THREADS": "4"}, {}, (Host("127.0.0.1", 2), Host("127.0.0.2", 2)))])
def test_threads_wins_over_the_environment_and_on_other_hosts(base_env, env, hosts):
    options = LaunchOptions((JOB,), 3, 1, threads=5, python=PY, env=env, hosts=hosts,
                            launcher="ssh" if hosts else "local")
    plan = build_plan(options, 1, (), 2, base_env)
    assert {s.env["OMP_NUM_THREADS"] for s in plan.of_role("worker")} == {"5"}
    servers = {s.env["OMP_NUM_THREADS"] for s in plan.specs if s.role != "worker"}
    assert servers == {env.get("OMP_NUM_THREADS", "1")}  # --threads is the workers' alone
    assert plan.notes == ()  # nothing to override: the user chose


def test_launch_refuses_an_unknown_option_in_one_line():
    import gluondist
    from gluondist.launcher.errors import LaunchError
    with pytest.raises(LaunchError, match=r"^launch\(\) got unknown option\(s\) dry_run; "):
        gluondist.launch("train.py", dry_run=True)




@pytest.mark.parametrize("name", ["DMLC_ROLE", "DMLC_NUM_WORKER", "DMLC_PS_ROOT_PORT",
                                  "GLUONDIST_RANK", "GLUONDIST_RESTART_COUNT", "DMLC_NODE_HOST"])
def test_env_cannot_override_what_the_launcher_sets_for_each_process(name):
    # a new user's --env GLUONDIST_RESTART_COUNT=9 reached the workers over the launcher's own
    with pytest.raises(LaunchError, match=rf"^--env {name}: the launcher sets it for each "
                                          r"process \(.+\); leave it out of --env$"):
        LaunchOptions((str(SCRIPTS / "job.py"),), env={name: "1"}).validate()
