"""The Kubernetes manifest's containers run as local processes: each index's command and
environment as Kubernetes would give them (pod IPs and the scheduler's DNS name resolving to
127.0.0.1), and the Job controller's part played by `JobController` below."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import SCRIPTS, TAG, kill_tagged, wait_until
from gluondist.launcher.monitor import free_ports
from gluondist.manifests import kubernetes, scheduler_host

pytestmark = pytest.mark.slow
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
    """What Kubernetes does with this Job, for what the test needs: start every index; when a
    pod fails and a podFailurePolicy rule with action FailJob matches its exit code, fail the
    Job and end every other running pod (SIGTERM to the container's process, SIGKILL after
    terminationGracePeriodSeconds); the Job completes when every index exits 0."""

    def __init__(self, job, cwd, tag, name):
        spec = job["spec"]
        self.rules = spec["podFailurePolicy"]["rules"]
        pod = spec["template"]["spec"]
        self.grace = pod["terminationGracePeriodSeconds"]
        (self.container,) = pod["containers"]
        self.pods = []
        # On one host ps-lite ranks nodes by port; ascending ports by index make kv.rank equal
        # GLUONDIST_RANK here, which job.py asserts (pods on their own IPs need no PORT).
        ports = sorted(free_ports(spec["completions"]))
        for index in range(spec["completions"]):
            env = pod_env(self.container, index, tag)
            env["PORT"] = str(ports[index])
            # DNS: the scheduler's name (index 0's hostname under the Service) is this machine
            assert env["DMLC_PS_ROOT_URI"] == f"{name}-0.{pod['subdomain']}"
            env["DMLC_PS_ROOT_URI"] = "127.0.0.1"
            self.pods.append(subprocess.Popen(self.container["command"], env=env, cwd=cwd,
                                              stdout=subprocess.DEVNULL, start_new_session=True))
        self.started = time.monotonic()
        self.ended = {}  # index -> (exit code, seconds since the start)
        self.failed_at = None

    def _fail_job_rule(self, code):
        for rule in self.rules:
            on = rule["onExitCodes"]
            if on.get("containerName", self.container["name"]) != self.container["name"]:
                continue
            hit = (code in on["values"]) == (on["operator"] == "In")
            if hit and rule["action"] == "FailJob":
                return True
        return False

    def step(self):
        now = time.monotonic() - self.started
        for index, pod in enumerate(self.pods):
            if index not in self.ended and pod.poll() is not None:
                self.ended[index] = (pod.returncode, now)
                if pod.returncode != 0 and self.failed_at is None \
                        and self._fail_job_rule(pod.returncode):
                    self.failed_at = now
                    for other in self.pods:
                        if other.poll() is None:
                            other.send_signal(signal.SIGTERM)
        if self.failed_at is not None and now > self.failed_at + self.grace:
            for pod in self.pods:
                if pod.poll() is None:
                    pod.kill()
        return len(self.ended) == len(self.pods)

    def run(self, timeout):
        wait_until(self.step, timeout=timeout, interval=0.05, message="every pod to end")
        return self.ended


def run_manifest(tmp_path, action, rank, timeout=120):
    name, tag = "job", uuid.uuid4().hex
    port = free_ports(1)[0]
    objects = kubernetes(name, "unused", ["python", str(SCRIPTS / "job.py"), action, str(rank)],
                         num_workers=2, num_servers=1, port=port)
    job = next(o for o in objects["items"] if o["kind"] == "Job")
    assert scheduler_host(name) == f"{name}-0.{name}"
    controller = JobController(job, tmp_path, tag, name)
    try:
        ended = controller.run(timeout)
    finally:
        for pod in controller.pods:
            if pod.poll() is None:
                pod.kill()
        stray = kill_tagged(tag)
    assert stray == []
    return ended, controller


def test_a_succeeding_job_ends_every_pod_with_0(tmp_path):
    ended, controller = run_manifest(tmp_path, "ok", "none")
    assert {code for code, _ in ended.values()} == {0}, ended
    assert controller.failed_at is None
    assert {p.name for p in tmp_path.glob("*.done")} == {"0.done", "1.done"}


def test_a_worker_exiting_3_fails_the_job_and_every_pod_ends(tmp_path):
    ended, controller = run_manifest(tmp_path, "exit", 1)
    # index 0 scheduler, 1 server, 2 worker 0, 3 worker 1
    code, when = ended[3]
    assert code == 3 and when < 30, ended  # the bootstrap ends the failing worker at once
    assert controller.failed_at is not None  # the podFailurePolicy rule matched
    assert all(t < 60 for _, t in ended.values()), ended
    # the others were ended by the Job's failure (SIGTERM, passed on by the pod entry),
    # not by the grace period's SIGKILL
    assert all(t < controller.failed_at + controller.grace for _, t in ended.values()), ended
    assert not list(tmp_path.glob("*.done"))
