"""The Kubernetes manifest's containers run as local processes: each index's command and
environment as Kubernetes would give them (pod IPs and the scheduler's DNS name resolving to
127.0.0.1), and the Job controller's part played by `JobController` below."""
import os
import signal
import subprocess
import sys
import time
import uuid

from conftest import SCRIPTS, TAG, kill_tagged, wait_until
from gluondist.launcher.ports import free_ports
from gluondist.launcher.kubernetes import kubernetes, scheduler_host

INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def pod_env(container, index, tag):
    """What the kubelet gives index ``index``'s container (plus this machine's PATH etc.)."""
    env = {**os.environ, "JOB_COMPLETION_INDEX": str(index), TAG: tag,
           # `python` in the command is this test's interpreter, as in the image
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = {"status.podIP": "127.0.0.1", INDEX_ANNOTATION: str(index)}[path]
    return env


class JobController:
    """What Kubernetes does with these Jobs, for what the tests need: start every index of each
    Job; when a pod fails and a podFailurePolicy rule with action FailJob matches its exit
    code, fail that Job and end its other running pods (SIGTERM to the container's process,
    SIGKILL after terminationGracePeriodSeconds); likewise when a Job runs past its
    activeDeadlineSeconds. A Job completes when every index exits 0."""

    def __init__(self, jobs, cwd, tag, scheduler):
        self.started = time.monotonic()
        self.pods = []  # (job name, index, Popen)
        self.jobs = {j["metadata"]["name"]: j for j in jobs}
        self.failed = {}  # job name -> seconds since the start
        self.ended = {}  # (job name, index) -> (exit code, seconds since the start)
        total = sum(j["spec"]["completions"] for j in jobs)
        # On one host ps-lite ranks nodes by port; ascending ports in Job order make kv.rank
        # equal GLUONDIST_RANK here, which job.py asserts (pods on their own IPs need none).
        ports = iter(sorted(free_ports(total)))
        for job in jobs:
            pod = job["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            for index in range(job["spec"]["completions"]):
                env = pod_env(container, index, tag)
                env["PORT"] = str(next(ports))
                # DNS: the scheduler's name (index 0's hostname under the Service) is here
                assert env["DMLC_PS_ROOT_URI"] == scheduler
                env["DMLC_PS_ROOT_URI"] = "127.0.0.1"
                self.pods.append((job["metadata"]["name"], index, subprocess.Popen(
                    container["command"], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                    start_new_session=True)))

    @staticmethod
    def _fail_job_rule(job, code):
        (container,) = job["spec"]["template"]["spec"]["containers"]
        for rule in job["spec"]["podFailurePolicy"]["rules"]:
            on = rule["onExitCodes"]
            if on.get("containerName", container["name"]) != container["name"]:
                continue
            if (code in on["values"]) == (on["operator"] == "In"):
                return rule["action"] == "FailJob"
        return False

    def _fail(self, name, now):
        self.failed[name] = now
        for job_name, _, pod in self.pods:
            if job_name == name and pod.poll() is None:
                pod.send_signal(signal.SIGTERM)

    def step(self):
        now = time.monotonic() - self.started
        for name, index, pod in self.pods:
            if (name, index) not in self.ended and pod.poll() is not None:
                self.ended[name, index] = (pod.returncode, now)
                if pod.returncode != 0 and name not in self.failed \
                        and self._fail_job_rule(self.jobs[name], pod.returncode):
                    self._fail(name, now)
        for name, job in self.jobs.items():
            deadline = job["spec"].get("activeDeadlineSeconds")
            if deadline and now > deadline and name not in self.failed and any(
                    n == name and p.poll() is None for n, _, p in self.pods):
                self._fail(name, now)
        for name, _, pod in self.pods:
            grace = self.jobs[name]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            if name in self.failed and now > self.failed[name] + grace and pod.poll() is None:
                pod.kill()
        return len(self.ended) == len(self.pods)

    def run(self, timeout):
        wait_until(self.step, timeout=timeout, interval=0.05, message="every pod to end")
        return self.ended


def run_manifest(tmp_path, action, rank, layout="one-job", deadline=None, timeout=120):
    name, tag = "job", uuid.uuid4().hex
    port = free_ports(1)[0]
    objects = kubernetes(name, "unused", ["python", str(SCRIPTS / "job.py"), action, str(rank)],
                         num_workers=2, num_servers=1, port=port, layout=layout,
                         active_deadline=deadline)
    jobs = [o for o in objects["items"] if o["kind"] == "Job"]
    controller = JobController(jobs, tmp_path, tag, scheduler_host(name, layout))
    try:
        ended = controller.run(timeout)
    finally:
        for _, _, pod in controller.pods:
            if pod.poll() is None:
                pod.kill()
        stray = kill_tagged(tag)
    assert stray == []
    return ended, controller


def test_a_succeeding_job_ends_every_pod_with_0(tmp_path):
    ended, controller = run_manifest(tmp_path, "ok", "none")
    assert {code for code, _ in ended.values()} == {0}, ended
    assert controller.failed == {}
    assert {p.name for p in tmp_path.glob("*.done")} == {"0.done", "1.done"}


def test_a_worker_exiting_3_fails_the_job_and_every_pod_ends(tmp_path):
    ended, controller = run_manifest(tmp_path, "exit", 1)
    # index 0 scheduler, 1 server, 2 worker 0, 3 worker 1
    code, when = ended["job", 3]
    assert code == 3 and when < 30, ended  # the bootstrap ends the failing worker at once
    failed_at = controller.failed["job"]  # the podFailurePolicy rule matched
    assert all(t < 60 for _, t in ended.values()), ended
    # the others were ended by the Job's failure (SIGTERM, passed on by the pod entry), well
    # before the grace period's SIGKILL
    assert all(t < failed_at + 10 for _, t in ended.values()), ended
    assert {code for key, (code, _) in ended.items() if key != ("job", 3)} == {143}, ended
    assert not list(tmp_path.glob("*.done"))


def test_per_role_jobs_succeed_together(tmp_path):
    ended, controller = run_manifest(tmp_path, "ok", "none", layout="per-role")
    assert {code for code, _ in ended.values()} == {0}, ended
    assert sorted(ended) == [("job-scheduler", 0), ("job-server", 0), ("job-worker", 0),
                             ("job-worker", 1)]


def test_per_role_a_failed_worker_leaves_the_rest_to_the_deadline(tmp_path):
    # what the README says this layout costs: the workers' Job fails at once, the scheduler's
    # and the servers' only when their activeDeadlineSeconds passes
    ended, controller = run_manifest(tmp_path, "exit", 1, layout="per-role", deadline=15)
    assert ended["job-worker", 1][0] == 3
    assert controller.failed["job-worker"] < 15
    assert 15 <= controller.failed["job-scheduler"] < 20
    assert 15 <= controller.failed["job-server"] < 20
    assert all(t < 60 for _, t in ended.values()), ended


def test_sigterm_reaches_a_process_that_left_the_roles_group(tmp_path):
    # A container is not always its own PID namespace (shareProcessNamespace): the pod entry
    # must end every process of the role's session, not just its process group.
    script = tmp_path / "escape.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " preexec_fn=os.setpgrp)\n"
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n")
    env = {**os.environ, "JOB_COMPLETION_INDEX": "2"}
    pod = subprocess.Popen([sys.executable, "-m", "gluondist.launcher.child.pod", "--servers", "1",
                            "--", "python", str(script)], env=env)
    try:
        wait_until(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(),
                   timeout=60, message="the escaped process started")
        escaped = int((tmp_path / "pid").read_text())
        pod.send_signal(signal.SIGTERM)
        assert pod.wait(timeout=30) == 143
        wait_until(lambda: not os.path.exists(f"/proc/{escaped}") or
                   open(f"/proc/{escaped}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                   timeout=10, message="the escaped process ended")
    finally:
        pod.kill()
        pod.wait()
        if (tmp_path / "pid").exists() and (tmp_path / "pid").read_text():
            try:
                os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
            except OSError:
                pass
