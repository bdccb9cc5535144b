"""The remote side of `--launcher ssh`, run directly as the process ssh would start: its
protocol on stdin, its exit report, and how it ends its tree when the launcher goes silent."""
import json
import os
import subprocess
import sys
import time
import uuid

import gluondist
from conftest import wait_until
from gluondist import wire
from gluondist.launcher.child import BOOTSTRAP, remote
from gluondist.launcher.child.proctree import STOP_GRACE

# a command that leaves a grandchild in a process group of its own, and prints both pids
TREE = ("import os, subprocess, sys, time; "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
        "preexec_fn=os.setpgrp); print(os.getpid(), g.pid, flush=True); time.sleep(600)")


def start(job, tmp_path, env=None, tag=None):
    job = {"protocol": remote.PROTOCOL, "env": {}, "cwd": str(tmp_path), "worker": False,
           "progress": False, "silence": None, **job}
    proc = subprocess.Popen([sys.executable, "-m", "gluondist.launcher.child.remote",
                             *(["--tag", tag] if tag else [])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    proc.stdin.write((json.dumps(job) + "\n").encode())
    proc.stdin.flush()
    return proc


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def tree_of(proc):
    return [int(p) for p in proc.stdout.readline().split()]


def test_it_runs_the_command_and_reports_its_exit_last(tmp_path):
    proc = start({"argv": [sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"]},
                 tmp_path)
    assert proc.wait(timeout=60) == 3  # stdin still open: its end would mean "stop"
    out, err = proc.stdout.read(), proc.stderr.read()
    assert out == b"hi\n"
    assert err.decode().splitlines()[-1] == "gluondist-exit 3"


def stop_tag(tag):
    return subprocess.run([sys.executable, "-m", "gluondist.launcher.child.remote", "--stop",
                           tag], capture_output=True, text=True, timeout=60)


def test_stop_by_tag_ends_that_launchers_trees_and_no_other(tmp_path):
    # what the launcher asks a lost host that answers again (its link came back before the
    # remote sides' silence ran out): their stdin is still open, so nothing else ends them
    mine, theirs = uuid.uuid4().hex, uuid.uuid4().hex  # no other run's
    ours = [start({"argv": [sys.executable, "-c", TREE]}, tmp_path, tag=mine) for _ in range(2)]
    other = start({"argv": [sys.executable, "-c", TREE]}, tmp_path, tag=theirs)
    # a process whose arguments only end like a remote side's of that tag
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "-m",
                              "gluondist.launcher.child.remote", "--tag", mine])
    try:
        trees = [tree_of(p) for p in (*ours, other)]
        stop = stop_tag(mine)
        assert json.loads(stop.stdout) == {"stopped": 2, "left": 0}, stop.stderr
        for proc, tree in zip(ours, trees):
            assert proc.wait(timeout=30) == 128 + 15  # as a stop: SIGTERM's exit status
            wait_until(lambda: not any(alive(p) for p in tree), timeout=STOP_GRACE + 10,
                       message="the tree to end")
        assert other.poll() is None and all(alive(p) for p in trees[2])
        assert decoy.poll() is None
        assert json.loads(stop_tag(mine).stdout) == {"stopped": 0, "left": 0}
    finally:
        stop_tag(theirs)  # the remote side ends its tree (a kill would orphan it)
        for proc in (*ours, other, decoy):
            proc.kill()
            proc.wait()


def test_a_job_of_another_protocol_is_refused_by_name(tmp_path):
    proc = start({"protocol": remote.PROTOCOL + 1, "argv": ["true"]}, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"the launcher sent protocol {remote.PROTOCOL + 1}" in out.decode()
    assert err.decode().splitlines()[-1] == "gluondist-exit 2"


def test_the_end_of_stdin_ends_the_whole_tree(tmp_path):
    proc = start({"argv": [sys.executable, "-c", TREE]}, tmp_path)
    pids = tree_of(proc)
    proc.stdin.close()
    assert proc.wait(timeout=30) == 128 + 15
    assert wait_until(lambda: not any(map(alive, pids)), 10)


def test_a_stopped_worker_leaves_no_temporary_directory_on_its_host(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = start({"argv": [sys.executable, "-c", TREE], "worker": True}, tmp_path,
                 env={**os.environ, "TMPDIR": str(tmp)})
    pids = tree_of(proc)
    assert [p.name[:10] for p in tmp.iterdir()] == ["gluondist-"]  # its error file's
    proc.stdin.close()
    assert proc.wait(timeout=30) == 128 + 15
    assert wait_until(lambda: not any(map(alive, pids)), 10)
    assert list(tmp.iterdir()) == []


def test_a_worker_that_failed_then_was_stopped_still_sends_its_record(tmp_path):
    # it raised, and its atexit handler was still running when the launcher stopped the job
    script = tmp_path / "slow_failure.py"
    script.write_text("import atexit, time\natexit.register(lambda: time.sleep(2))\n"
                      "print('started', flush=True)\nraise RuntimeError('slow failure')\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = start({"argv": [sys.executable, "-m", BOOTSTRAP, str(script)], "worker": True},
                 tmp_path, env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.stdout.readline() == b"started\n"
    assert wait_until(lambda: list(tmp.glob("*/error.json")), 10)
    proc.stdin.close()
    assert proc.wait(timeout=30) == 128 + 15
    lines = proc.stderr.read().decode().splitlines()
    records = [json.loads(line.split(" ", 1)[1]) for line in lines
               if line.startswith("gluondist-error ")]
    assert len(records) == 1 and "slow failure" in json.dumps(records[0])
    assert list(tmp.iterdir()) == []


def test_silence_ends_the_tree_and_keepalives_hold_it_off(tmp_path):
    proc = start({"argv": [sys.executable, "-c", TREE], "silence": 1.0}, tmp_path)
    try:
        pids = tree_of(proc)
        for _ in range(10):  # 2 s of keepalives, each well within the 1 s of silence allowed
            proc.stdin.write(b"ping\n")
            proc.stdin.flush()
            time.sleep(0.2)
        assert all(map(alive, pids)) and proc.poll() is None
        stopped_pinging = time.monotonic()
        # a lost link, however late the report arrives: never the worker's SIGTERM (143)
        assert proc.wait(timeout=30) == wire.SILENCED
        assert time.monotonic() - stopped_pinging < 1.0 + 3.0
        assert wait_until(lambda: not any(map(alive, pids)), STOP_GRACE + 5)
        assert b"no word from the launcher for 1s" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_a_tree_that_ignores_sigterm_is_killed(tmp_path):
    stubborn = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + TREE
    proc = start({"argv": [sys.executable, "-c", stubborn]}, tmp_path)
    pids = tree_of(proc)
    closed = time.monotonic()
    proc.stdin.close()
    assert proc.wait(timeout=30) == 128 + 15
    assert STOP_GRACE - 0.5 < time.monotonic() - closed < STOP_GRACE + 5
    assert not any(map(alive, pids))


def test_preflight_reports_the_version_and_protocol():
    out = subprocess.run([sys.executable, "-m", "gluondist.launcher.child.remote", "--preflight"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == {"gluondist": gluondist.__version__,
                               "protocol": remote.PROTOCOL, "mxnet": True}


def test_over_ssh_the_jobs_settings_reach_the_remote_hosts():
    # issue 36, defect 1: what a local job's children take from the launcher's environment
    # (GLUONDIST_EXIT_GRACE, the chunk settings, ps-lite's PS_*) goes over ssh too; what the
    # plan or the transport sets per process, or that names the launcher's own host, does not
    from gluondist.launcher.plan import ProcessSpec
    from gluondist.launcher.transports import ssh
    base = {"GLUONDIST_EXIT_GRACE": "3", "GLUONDIST_CHUNK_BYTES": "4096",
            "GLUONDIST_CHUNKS_IN_FLIGHT": "1", "PS_RESEND": "1", "PS_VERBOSE": "2",
            "GLUONDIST_PROGRESS_FD": "9", "GLUONDIST_ERROR_FILE": "/tmp/x.json",
            "GLUONDIST_RANK": "5", "DMLC_ROLE": "x", "HOME": "/root", "PYTHONPATH": "/p"}
    env = ssh.forwarded_env(base)
    assert env == {"GLUONDIST_EXIT_GRACE": "3", "GLUONDIST_CHUNK_BYTES": "4096",
                   "GLUONDIST_CHUNKS_IN_FLIGHT": "1", "PS_RESEND": "1", "PS_VERBOSE": "2",
                   "PYTHONPATH": "/p"}
    # the job's line on the session's stdin: the plan's values over the forwarded ones
    spec = ProcessSpec("worker", 0, "h", ("train",), {"GLUONDIST_RANK": "0", "PS_VERBOSE": "1"})
    job = ssh.SshTransport(sys.executable, base, "/w").job(spec)
    assert job["env"] == {**env, "GLUONDIST_RANK": "0", "PS_VERBOSE": "1"}


def test_the_environment_page_lists_exactly_the_jobs_settings():
    # what docs/environment.md says reaches the remote hosts is the declaration ssh.py reads
    import re
    from conftest import ROOT
    from gluondist import envvars as ev
    page = (ROOT / "docs" / "environment.md").read_text()
    section = page.split("## What you can set for a job", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, re.M) == list(ev.JOB_SETTINGS)
    assert "`gluondist.envvars.JOB_SETTINGS`" in section and "`PS_*`" in section
