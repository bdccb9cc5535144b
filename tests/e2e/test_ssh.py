"""`gluondist launch --launcher ssh` against a real sshd on loopback: 127.0.0.1 and 127.0.0.2
are two hosts (Linux routes all of 127/8 to lo), with key authentication made here. A remote
worker's error record longer than the log tail is relayed whole in the fast tier
(launcher/test_control_loop.py, over the real ssh transport and remote side)."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import venv

import pytest

from conftest import ROOT, SCRIPTS, wait_until
from gluondist.launcher.transports import ssh
from gluondist.launcher.ports import free_ports
from gluondist.launcher.errors import LaunchError

JOB = str(SCRIPTS / "job.py")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@pytest.fixture(scope="module")
def ssh_config(tmp_path_factory):
    if not os.path.exists(SSHD):
        message = "sshd missing: apt-get install openssh-server (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    d = tmp_path_factory.mktemp("ssh")
    for name in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                       check=True)
    shutil.copy(d / "id.pub", d / "authorized_keys")
    port = free_ports(1)[0]
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nListenAddress 127.0.0.2\n"
        f"HostKey {d / 'host_key'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {d / 'sshd.pid'}\n")
    (d / "ssh_config").write_text(
        f"Host *\n  Port {port}\n  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n"
        "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n")
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    daemon = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                              stderr=open(d / "sshd.log", "wb"))
    try:
        def listening():
            for host in ("127.0.0.1", "127.0.0.2"):
                with socket.socket() as s:
                    if s.connect_ex((host, port)) != 0:
                        return False
            return True
        wait_until(listening, timeout=30, message="sshd to listen")
        yield str(d / "ssh_config")
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def wrappers(ssh_config):
    """Remote sides still alive that this module's sshd started (this machine is both 'hosts';
    the fast tests beside these start remote sides of their own without sshd)."""
    port = open(ssh_config).read().split("Port ")[1].split()[0]
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if ssh.REMOTE.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        # SSH_CONNECTION: client address and port, server address and port
        if any(v.startswith(b"SSH_CONNECTION=") and v.split()[-1].decode() == port
               for v in environ):
            found.append(int(pid))
    return found


def ssh_launch(launch, ssh_config, *args, env=None):
    return launch("--launcher", "ssh", "--ssh-config", ssh_config, *args, env=env)


def test_a_two_host_job(launch, ssh_config, tmp_path):
    job = ssh_launch(launch, ssh_config, "-H", "127.0.0.1:1,127.0.0.2:1", "-n", 2, "-s", 2,
                     "--threads", 1, JOB, "ok", env={"OMP_NUM_THREADS": "4"})
    assert job.wait(timeout=120) == 0, job.err
    # ranks follow ps-lite's order (descending host name), each node on its own address;
    # --threads reaches the remote workers, over the launcher's own OMP_NUM_THREADS
    assert "[worker 0] worker 0 on 127.0.0.2 pulled 3 (OMP_NUM_THREADS=1)" in job.out
    assert "[worker 1] worker 1 on 127.0.0.1 pulled 3 (OMP_NUM_THREADS=1)" in job.out
    assert {p.name for p in tmp_path.glob("*.done")} == {"0.done", "1.done"}
    assert job.leftovers() == [] and wait_until(lambda: not wrappers(ssh_config), 10) is True


def test_losing_a_worker_on_one_host_stops_both(launch, ssh_config, tmp_path):
    (tmp_path / "hosts").write_text("# two hosts\n127.0.0.1 slots=1\n\n127.0.0.2 slots=1\n")
    job = ssh_launch(launch, ssh_config, "--hostfile", "hosts", "-n", 2, "-s", 1, JOB, "exit", 0)
    assert job.wait(timeout=120) == 3
    assert "worker 0 on 127.0.0.2 failed first: exit code 3" in job.err
    assert not list(tmp_path.glob("*.done"))
    assert job.leftovers() == [] and wait_until(lambda: not wrappers(ssh_config), 10) is True


def test_killing_the_launcher_ends_the_remote_processes(launch, ssh_config, tmp_path):
    job = ssh_launch(launch, ssh_config, "-H", "127.0.0.1:1,127.0.0.2:1", "-n", 2, "-s", 1,
                     JOB, "hang", "all")
    wait_until(lambda: len(list(tmp_path.glob("*.hanging"))) == 2, message="the job to run")
    assert len(wrappers(ssh_config)) >= 2  # a remote side per host (and its shell), found
    job.proc.send_signal(signal.SIGKILL)
    job.proc.wait()
    assert job.leftovers(timeout=15) == []
    assert wait_until(lambda: not wrappers(ssh_config), 15) is True


def test_a_script_path_with_a_space_and_a_semicolon(launch, ssh_config, tmp_path):
    odd = tmp_path / "my dir;echo pwned"
    odd.mkdir()
    shutil.copy(JOB, odd / "job.py")
    job = ssh_launch(launch, ssh_config, "-H", "127.0.0.2:1", "-n", 1, "-s", 1,
                     odd / "job.py", "argv", "a b", "c;d")
    assert job.wait(timeout=120) == 0, job.err
    assert "[worker 0] ARGV ['argv', 'a b', 'c;d']" in job.out
    assert "pwned" not in job.out


def test_an_unreachable_host_fails_fast_and_named(launch, ssh_config):
    start = time.monotonic()
    job = ssh_launch(launch, ssh_config, "-H", "127.0.0.1:1,127.0.0.3:1", "-n", 2, JOB, "ok")
    assert job.wait(timeout=60) == 2
    assert time.monotonic() - start < 30
    assert "host 127.0.0.3: ssh failed" in job.err and "Connection refused" in job.err


def test_a_host_without_gluondist_or_mxnet_is_named(ssh_config, tmp_path):
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a Python with neither gluondist nor MXNet
    with pytest.raises(LaunchError, match="host 127.0.0.1: gluondist is not installed for "
                                          ".*bare.*; install gluondist 0.1.0 there"):
        ssh.preflight(["127.0.0.1", "127.0.0.2"], str(bare / "bin" / "python"), ssh_config)
    site, = bare.glob("lib/python*/site-packages")
    (site / "gluondist.pth").write_text(str(ROOT) + "\n")  # gluondist, still no MXNet
    with pytest.raises(LaunchError, match="host 127.0.0.1: MXNet is not installed for .*bare"):
        ssh.preflight(["127.0.0.1", "127.0.0.2"], str(bare / "bin" / "python"), ssh_config)
    ssh.preflight(["127.0.0.1", "127.0.0.2"], sys.executable, ssh_config)  # this one has it


def test_secrets_never_reach_a_command_line(ssh_config):
    env = ssh.forwarded_env({"AWS_SECRET_ACCESS_KEY": "s3cr3t", "HOME": "/root",
                             "SSH_AUTH_SOCK": "/tmp/a", "DMLC_ROLE": "x", "PYTHONPATH": "/p"})
    assert env == {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "PYTHONPATH": "/p"}  # sent on stdin
    argv = ssh.ssh_argv("h", [sys.executable, "-m", ssh.REMOTE], ssh_config)
    assert "s3cr3t" not in " ".join(argv)
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]


def test_a_stall_over_ssh_shows_the_remote_stack(launch, ssh_config, tmp_path):
    # worker 1 is on 127.0.0.1; the dump request travels on ssh's stdin to the remote wrapper,
    # the heartbeats come back on the session's stderr
    job = ssh_launch(launch, ssh_config, "-H", "127.0.0.1:1,127.0.0.2:1", "-n", 2, "-s", 1,
                     "--stall-timeout", 4, SCRIPTS / "stall_job.py", "beat", 1)
    wait_until(lambda: list(tmp_path.glob("*.stuck")) or job.proc.poll() is not None,
               timeout=120, message="a worker to get stuck")
    stuck_at = time.monotonic()
    assert job.wait(timeout=120) == 124, job.err
    assert time.monotonic() - stuck_at < 4 + 15
    assert "20 batches" in job.err
    assert "in stuck_forever" in job.err.split("worker 1's stack")[1]
    assert job.leftovers() == [] and wait_until(lambda: not wrappers(ssh_config), 10) is True
