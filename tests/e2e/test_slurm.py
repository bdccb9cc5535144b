"""`gluondist launch --launcher slurm` in a real Slurm: slurmctld and two slurmd daemons (nodes
n1 at 127.0.0.1 and n2 at 127.0.0.2) on this machine, started here, submitting the sbatch
template from launch/slurm/."""
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import uuid

import pytest

import docpages
from conftest import ROOT, SCRIPTS, TAG, tagged_pids, wait_until
from gluondist.launcher.ports import free_ports

TEMPLATE = str(ROOT / "launch" / "slurm" / "gluondist.sbatch")
GLUONDIST = f"{sys.executable} -m gluondist.cli"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if not shutil.which("slurmctld"):
        message = "Slurm missing: apt-get install slurm-wlm (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    d = tmp_path_factory.mktemp("slurm")
    (d / "state").mkdir()
    host = socket.gethostname()
    ctld, n1, n2 = free_ports(3)
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=gluondisttest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=n1 NodeHostname={host} NodeAddr=127.0.0.1 Port={n1} CPUs=2 RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname={host} NodeAddr=127.0.0.2 Port={n2} CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = [subprocess.Popen(["slurmctld", "-D", "-f", str(conf)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for node in ("n1", "n2"):
            daemons.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf), "-N", node],
                                            env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))

        def idle():
            proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env,
                                  capture_output=True, text=True)
            return proc.stdout.split() == ["n1", "idle", "n2", "idle"]
        wait_until(idle, timeout=60, interval=0.5, message="two idle Slurm nodes")
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True)
        for daemon in daemons:
            daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def sbatch(slurm, tmp_path, script_args, workers=2):
    tag = uuid.uuid4().hex
    exports = {"GLUONDIST": GLUONDIST, "WORKERS": str(workers), "SCRIPT": str(SCRIPTS / "job.py"),
               "SCRIPT_ARGS": script_args, TAG: tag}
    code, final = submit(["sbatch", "--parsable", f"--chdir={tmp_path}",
                          f"--output={tmp_path}/out.txt",
                          "--export=ALL," + ",".join(f"{k}={v}" for k, v in exports.items()),
                          TEMPLATE], slurm)
    return code, (tmp_path / "out.txt").read_text(), final, tag


def submit(argv, env, cwd=None):
    """Submit with ``argv`` (an sbatch command), wait for the job to end; its exit code and
    ``scontrol show job``'s last word on it."""
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    job = re.search(r"(\d+)", proc.stdout)[1]  # `Submitted batch job N`, or --parsable's N

    def state():
        return subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                              text=True).stdout

    # polled here rather than by `sbatch --wait`, whose polls back off to half a minute apart
    assert wait_until(lambda: re.search(r"JobState=(?!PENDING|RUNNING|COMPLETING|CONFIGURING)",
                                        state()), 300, interval=0.5, message="the job to end")
    final = state()
    return int(re.search(r"ExitCode=(\d+):", final)[1]), final


def test_a_two_node_job_completes(slurm, tmp_path):
    code, out, state, tag = sbatch(slurm, tmp_path, "ok")
    assert code == 0, out
    assert "JobState=COMPLETED" in state
    assert "[worker 0] worker 0 on 127.0.0.2 pulled 3" in out  # one worker on each node
    assert "[worker 1] worker 1 on 127.0.0.1 pulled 3" in out
    assert {p.name for p in tmp_path.glob("*.done")} == {"0.done", "1.done"}
    assert wait_until(lambda: not tagged_pids(tag), 15) is True


def test_the_docs_sbatch_command_runs_four_workers_on_two_nodes(slurm, tmp_path):
    """docs/multi-host.md's command, as it is, from a directory holding train.py and the
    template; `gluondist` is the one on PATH, as in the virtual environment a user activated."""
    [command] = docpages.commands(docpages.block("docs/multi-host.md", "sbatch "))
    (tmp_path / "launch" / "slurm").mkdir(parents=True)
    shutil.copy(TEMPLATE, tmp_path / "launch" / "slurm")
    shutil.copy(SCRIPTS / "job.py", tmp_path / "train.py")  # 3 dist_sync rounds, <rank>.done
    tag = uuid.uuid4().hex
    env = {**slurm, TAG: tag, "PATH": f"{os.path.dirname(sys.executable)}:{slurm['PATH']}"}
    code, state = submit(shlex.split(command), env, cwd=tmp_path)
    out = next(tmp_path.glob("gluondist-*.out")).read_text()
    assert code == 0 and "JobState=COMPLETED" in state, out
    # two workers on each node, worker 0 on the node of the highest address (docs/concepts.md)
    for rank, node in ((0, "127.0.0.2"), (1, "127.0.0.2"), (2, "127.0.0.1"), (3, "127.0.0.1")):
        assert f"[worker {rank}] worker {rank} on {node} pulled 10" in out, out
    assert {p.name for p in tmp_path.glob("*.done")} == {f"{r}.done" for r in range(4)}
    assert wait_until(lambda: not tagged_pids(tag), 15) is True


def test_a_failing_worker_fails_the_slurm_job_with_its_code(slurm, tmp_path):
    code, out, state, tag = sbatch(slurm, tmp_path, "exit 1")
    assert code == 3, out
    assert "JobState=FAILED" in state and "ExitCode=3:0" in state
    assert "worker 1 on n1 failed first: exit code 3" in out
    assert not list(tmp_path.glob("*.done"))
    assert wait_until(lambda: not tagged_pids(tag), 15) is True


def test_outside_an_allocation_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", "--launcher",
                           "slurm", str(SCRIPTS / "job.py")], env=env, capture_output=True,
                          text=True, timeout=60)  # run_cli adds to os.environ; this removes
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("gluondist: error: --launcher slurm runs inside a Slurm "
                                   "allocation (sbatch or salloc); none found (SLURM_JOB_ID is "
                                   "unset)")
