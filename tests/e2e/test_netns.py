"""`gluondist launch --launcher ssh` on hosts that can really be cut off: a cluster of network
namespaces on one bridge (tests/netns.py), each host with its own sshd and a 1 Gbit/s link.

Each test prints what it measured (run with -s to see it); the README's "Beyond one machine"
quotes those figures."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import gluondist
import netns
from conftest import (SCRIPTS, assert_same_history, assert_same_params, job_results,
                      one_process, wait_until)
from gluondist.launcher.child.remote import PROTOCOL
from gluondist.launcher.transports import ssh
from gluondist.launcher.outcome import LOST_EXIT

SCRIPT = str(SCRIPTS / "fit_job.py")


@pytest.fixture
def cluster(tmp_path):
    """Three namespace hosts, torn down after the test however it ends."""
    netns.require()
    with netns.Cluster(3, tmp_path / "net", rate="1gbit") as made:
        yield made


def measured(what, seconds):
    print(f"\nmeasured: {what}: {seconds:.1f}s")


def fit_on(launch, cluster, tmp_path, hosts, *args, epochs=4, **opts):
    """fit_job.py (2 workers x batch 32) over ssh on ``hosts`` (each with one slot)."""
    (tmp_path / "hosts").write_text("".join(f"{h} slots=1\n" for h in hosts))
    opts = {"ckpt": str(tmp_path / "ckpt"), **opts}
    return launch("--launcher", "ssh", "--ssh-config", cluster.ssh_config, "-H", "hosts",
                  "-n", 2, "-s", 1, *args, SCRIPT, tmp_path, epochs, 32, json.dumps(opts))


def wait_for_epochs(job, tmp_path, count):
    def done():
        assert job.proc.poll() is None, job.wait()
        return len(list((tmp_path / "ckpt").glob("ckpt-*"))) >= count
    wait_until(done, timeout=180, interval=0.1, message=f"{count} epoch(s) to be checkpointed")


def like_one_process(tmp_path):
    (p0, p1), (h0, _) = job_results(tmp_path, 2)
    ref, ref_history = one_process(4, 64)
    assert_same_params(p0, ref, 1e-4)
    assert_same_params(p1, p0)
    assert_same_history(h0, ref_history)


def test_a_cut_link_is_named_and_nothing_survives_on_the_cut_host(launch, cluster, tmp_path):
    first, second = cluster.hosts[:2]  # the scheduler and server on first; worker 0 on second
    job = fit_on(launch, cluster, tmp_path, [first, second], epochs=100, batch_sleep=0.2)
    wait_for_epochs(job, tmp_path, 1)
    assert cluster.pids(second), "the job runs on the host about to be cut"
    cluster.cut(second)
    cut = time.monotonic()
    assert job.wait(timeout=120) == LOST_EXIT, job.err
    reported = time.monotonic() - cut
    measured("cut link -> launcher's report", reported)
    # ssh gives up within 20 s, then the teardown and one connect timeout (6 s) to the host
    assert reported < 40
    assert f"gluondist: lost the connection to host {second}, where worker 0 ran" in job.err
    assert f"exit code {LOST_EXIT} (lost a host)" in job.err
    assert f"gluondist: host {second} does not answer (ssh: connect to host {second} port 22: " \
        "Connection timed out): what the job ran there ends by itself 25s after the " \
        "launcher's last word reached it (--link-timeout)" in job.err
    # the reachable host was cleaned up by the teardown (its remote side's SIGTERM, SIGKILL)
    wait_until(lambda: not cluster.pids(first), timeout=15, message=f"{first} to be cleared")
    ended = time.monotonic()
    wait_until(lambda: not cluster.pids(second), timeout=45, interval=0.2,
               message=f"the job's processes on the cut host {second} to end")
    measured("cut link -> nothing left on the cut host", time.monotonic() - cut)
    measured("launcher's exit -> nothing left on the cut host", time.monotonic() - ended)


def sessions_to(host):
    """The launcher's ssh sessions to ``host`` (this machine's ssh clients running a remote
    side there)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0] == b"ssh" and host.encode() in argv and b"--tag" in argv[-2]:
            found.append(int(pid))
    return found


def test_an_outage_just_past_the_launchers_give_up_leaves_nothing_behind(launch, cluster,
                                                                          tmp_path):
    # The link comes back the moment ssh has given up on the host's session (15-20 s), before
    # the far side's own silence limit (25 s): the far side still runs, and nothing closed its
    # stdin. The launcher reaches the host again to stop it before it exits; before it did,
    # the far side outlived the launcher.
    first, second = cluster.hosts[:2]
    job = fit_on(launch, cluster, tmp_path, [first, second], epochs=100, batch_sleep=0.2)
    wait_for_epochs(job, tmp_path, 1)
    assert sessions_to(second), "the launcher has a session to the host about to be cut"
    cluster.cut(second)
    cut = time.monotonic()
    wait_until(lambda: not sessions_to(second), timeout=60, interval=0.05,
               message="ssh to give up on the cut host")
    cluster.heal(second)
    measured("cut link -> ssh gave up, link back", time.monotonic() - cut)
    assert job.wait(timeout=120) == LOST_EXIT, job.err
    assert not cluster.pids(second), f"left running on {second} after the launcher's exit"
    assert f"lost the connection to host {second}, where worker 0 ran" in job.err
    assert f"gluondist: host {second} answered again: stopped the job's 1 process(es) left " \
        "there" in job.err, job.err  # worker 0's remote side (and its tree)


def test_a_4s_blip_changes_nothing(launch, cluster, tmp_path):
    first, second = cluster.hosts[:2]
    # 3 epochs of 3 batches, each worker sleeping 0.2 s after each, are left when the link goes
    job = fit_on(launch, cluster, tmp_path, [first, second], batch_sleep=0.2)
    wait_for_epochs(job, tmp_path, 1)
    cluster.cut(second)
    time.sleep(4.0)
    cluster.heal(second)
    assert job.wait(timeout=180) == 0, job.err
    like_one_process(tmp_path)
    assert "lost the connection" not in job.err


def test_a_host_down_at_start_is_one_line_and_nothing_starts(launch, cluster, tmp_path):
    first, second = cluster.hosts[:2]
    cluster.cut(second)
    start = time.monotonic()
    job = fit_on(launch, cluster, tmp_path, [first, second])
    assert job.wait(timeout=60) == 2
    took = time.monotonic() - start
    measured("host down at start -> preflight names it", took)
    assert took < 15
    assert job.err.strip().count("\n") == 0, job.err
    assert f"host {second}: ssh failed" in job.err
    assert not list(tmp_path.glob("params.*")) and not cluster.pids(first)


def test_a_restart_leaves_the_lost_first_host_out(launch, cluster, tmp_path):
    # The first host runs the scheduler, the server and worker 1; lost, the job restarts on
    # the other two (the scheduler on the first of them) and resumes from the checkpoints.
    # The host crashes rather than being cut: what follows the loss is the test. A cut link
    # would add ssh's keepalive (15 s) and connect timeout (10 s), which the cut-link and the
    # host-down tests above cover.
    first, second, third = cluster.hosts
    job = fit_on(launch, cluster, tmp_path, [first, second, third], "--max-restarts", 1,
                 batch_sleep=0.3)
    wait_for_epochs(job, tmp_path, 2)
    cluster.crash(first)
    lost = time.monotonic()
    assert job.wait(timeout=240) == 0, job.err
    measured("first host lost -> restarted job finished", time.monotonic() - lost)
    assert f"attempt 1 failed: lost the connection to host {first}, where scheduler, " \
           "server 0, worker 1 ran" in job.err
    assert f"host {first} is unreachable (ssh failed: " in job.err
    assert ": left out of attempt 2" in job.err
    assert "succeeded after 1 restart(s)" in job.err
    like_one_process(tmp_path)


def test_a_restart_that_would_need_fewer_workers_is_refused(launch, cluster, tmp_path):
    first, second = cluster.hosts[:2]
    job = fit_on(launch, cluster, tmp_path, [first, second], "--max-restarts", 1, epochs=100,
                 batch_sleep=0.2)
    wait_for_epochs(job, tmp_path, 1)
    cluster.crash(second)  # no wait for timeouts: what follows the loss is the test
    assert job.wait(timeout=120) == LOST_EXIT, job.err
    assert f"attempt 1 failed: lost the connection to host {second}, where worker 0 ran" \
        in job.err
    assert f"host {second} is unreachable (ssh failed: " in job.err
    assert "gluondist: cannot restart: the hosts left have 1 slot(s) for -n 2; -n is never " \
           "lowered" in job.err
    assert "restarting the job" not in job.err
    assert job.err.strip().splitlines()[-1] == f"gluondist: exit code {LOST_EXIT} (lost a host)"


def test_a_host_with_another_gluondist_is_named(cluster, tmp_path):
    first, second = cluster.hosts[:2]
    old = tmp_path / "old"
    shutil.copytree(os.path.dirname(gluondist.__file__), old / "gluondist")
    init = old / "gluondist" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{gluondist.__version__}"', '"0.0.9"'))
    python = tmp_path / "python"  # a Python whose gluondist is that older copy
    python.write_text(f"#!/bin/sh\nPYTHONPATH={old} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    with pytest.raises(ssh.LaunchError) as raised:
        ssh.preflight([first, second], str(python), cluster.ssh_config)
    assert str(raised.value) == (
        f"host {first}: gluondist 0.0.9 (protocol {PROTOCOL}) for {python}, but the launcher "
        f"runs gluondist {gluondist.__version__} (protocol {PROTOCOL}); install gluondist "
        f"{gluondist.__version__} there")
    ssh.preflight([first, second], sys.executable, cluster.ssh_config)


def test_the_cluster_reaches_only_itself(cluster):
    first, second = cluster.hosts[:2]
    probe = ("import socket, sys; s = socket.socket(); s.settimeout(2); "
             "print(s.connect_ex((sys.argv[1], 22)))")

    def reach(address):
        out = cluster.run(first, sys.executable, "-c", probe, address, capture_output=True,
                          text=True, timeout=30).stdout
        return int(out) == 0

    assert reach(second)
    cluster.cut(second)
    assert not reach(second)
    cluster.heal(second)
    assert reach(second)
    routes = cluster.run(first, "ip", "route", capture_output=True, text=True).stdout
    assert routes.strip() == f"{cluster.subnet}.0/24 dev eth0 proto kernel scope link src " \
                             f"{first}"
    qdiscs = cluster.run(first, "tc", "qdisc", "show", "dev", "eth0", capture_output=True,
                         text=True).stdout
    assert "tbf" in qdiscs and "rate 1Gbit" in qdiscs


def test_no_namespace_outlives_a_failing_test(tmp_path):
    netns.require()
    with pytest.raises(RuntimeError, match="a test failing"):
        with netns.Cluster(2, tmp_path / "net") as made:
            names = list(made.ns.values()) + [made.bridge_ns]
            sleeper = subprocess.Popen(["ip", "netns", "exec", made.ns[made.hosts[0]], "sleep",
                                        "600"])
            wait_until(lambda: made.pids(made.hosts[0]), timeout=10, message="sleep to start")
            raise RuntimeError("a test failing")
    assert sleeper.wait(timeout=10) == -9
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [n for n in names if n in listed]
    assert made.uplink not in subprocess.run(["ip", "link"], capture_output=True,
                                             text=True).stdout
