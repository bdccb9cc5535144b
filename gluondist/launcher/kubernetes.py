"""Plain Kubernetes objects for a parameter-server job: no operator needed (Kubeflow dropped
its MXJob operator in training-operator 1.9), no controller of ours.

One Indexed Job runs every process of the job; the completion index picks the role (0 the
scheduler, then the servers, then the workers: gluondist.launcher.child.pod). A ``podFailurePolicy``
rule fails the whole Job on any non-zero exit, and Kubernetes then ends every other pod of it;
when every index succeeds the Job completes. A headless Service gives the pods stable DNS names
(``<name>-0.<name>`` is the scheduler). Every node advertises its Pod IP (downward API). Each
role's environment comes from gluondist.launcher.roles, as for the local, ssh and Slurm
launchers.
"""
from __future__ import annotations

import copy
import re
from typing import Dict, List, Optional, Sequence

from .. import envvars as ev
from . import child
from .errors import LaunchError
from .options import check_env, check_kvstore, check_whole
from .roles import is_python, job_env, worker_defaults

CONTAINER = "gluondist"
POD_ENTRY = ("-m", child.POD)
GRACE_SECONDS = 15  # how long a pod may take to stop once the Job failed, then SIGKILL
SCHEDULER_PORT = 9091  # the scheduler's port in its pod (--port; any port the pods may use)


def _env(values: Dict[str, str]) -> List[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


LAYOUTS = ("one-job", "per-role")
# Kubernetes' DNS-1035 label (a Service's name): a lowercase letter, then letters, digits and
# '-', not ending in '-'; at most 42 characters here, leaving room for the per-role Jobs'
# "-scheduler" and an index in their pods' 63-character hostnames.
NAME = re.compile(r"[a-z]([-a-z0-9]{0,40}[a-z0-9])?")


def check(name: str, image: str, command: Sequence[str], num_workers: int, num_servers: int,
          port: int, kvstore: str, gpus_per_worker: int, env: Dict[str, str], layout: str,
          active_deadline: Optional[int]) -> None:
    """Raise LaunchError, as the CLI would, unless Kubernetes would take ``name`` (see NAME)
    and ``image`` (a non-empty reference; whitespace is never part of one), and the rest makes
    a job."""
    if isinstance(command, str) or not command or \
            not all(isinstance(part, str) and part for part in command):
        raise LaunchError(f"the container's command must be a list of non-empty strings, such "
                          f"as ['python', 'train.py'], not {command!r}")
    check_whole("-n/--num-workers", num_workers, 1)
    check_whole("-s/--num-servers", num_servers, 1)
    check_whole("--gpus-per-worker", gpus_per_worker, 0)
    check_whole("--port", port, 1, 65535)
    if active_deadline is not None:
        check_whole("--active-deadline", active_deadline, 1)
    check_env(env)
    if not isinstance(name, str) or not isinstance(image, str):
        raise LaunchError(f"--name and --image must be strings, not {name!r} and {image!r}")
    check_kvstore(kvstore)
    if layout not in LAYOUTS:
        raise LaunchError(f"--layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    if not NAME.fullmatch(name):
        raise LaunchError(f"--name {name!r} must be a DNS-1035 label of at most 42 characters: "
                          "lowercase letters, digits and '-', starting with a letter and not "
                          "ending with '-'")
    if not image or any(c.isspace() for c in image):
        raise LaunchError(f"--image {image!r} must be an image reference such as "
                          "registry/gluondist:1.0, non-empty and without whitespace")


def scheduler_host(name: str, layout: str = "one-job") -> str:
    """The scheduler pod's DNS name: index 0's hostname under the headless Service."""
    job = name if layout == "one-job" else f"{name}-scheduler"
    return f"{job}-0.{name}"


def container_command(command: Sequence[str], num_servers: int, kvstore: str,
                      role: Optional[str] = None) -> List[str]:
    """The pod entry, run by the command's own Python when the command is ``python ...``."""
    python = command[0] if command and is_python(command[0]) else "python"
    chosen = ["--role", role] if role else []
    return [python, *POD_ENTRY, "--servers", str(num_servers), "--kvstore", kvstore, *chosen,
            "--", *command]


# Any process failing fails the Job; Kubernetes then ends all its other pods. (onPodConditions:
# [] is no condition, but the 1.26-1.28 schemas require the field.)
FAIL_ON_ANY_ERROR = {"rules": [{
    "action": "FailJob", "onPodConditions": [],
    "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]}}]}


def kubernetes(name: str, image: str, command: Sequence[str], num_workers: int,
               num_servers: int, port: int = SCHEDULER_PORT, kvstore: str = "dist_sync",
               gpus_per_worker: int = 0, env: Optional[Dict[str, str]] = None,
               layout: str = "one-job", active_deadline: Optional[int] = None) -> dict:
    """A ``v1 List`` of the objects to ``kubectl apply -f``: a headless Service and, with the
    ``one-job`` layout, one Indexed Job of ``1 + num_servers + num_workers`` pods; with
    ``per-role``, one Indexed Job per role (each its own resources; GPUs for workers only), in
    which a failing worker fails only the workers' Job. ``active_deadline`` bounds every Job's
    run time (``activeDeadlineSeconds``)."""
    if env is not None and not isinstance(env, dict):
        raise LaunchError(f"env must be a dict of KEY: VALUE strings, not {env!r}")
    env = dict(env or {})
    check(name, image, command, num_workers, num_servers, port, kvstore, gpus_per_worker, env,
          layout, active_deadline)
    labels = {"app.kubernetes.io/name": "gluondist", "gluondist.io/job": name}
    common = job_env(scheduler_host(name, layout), port, num_workers, num_servers)
    # ps-lite binds the scheduler to 0.0.0.0 instead of its DNS name under this flag
    common[ev.DMLC_USE_KUBERNETES] = "1"
    # one pod template may serve every role: the workers' defaults reach the others unread
    defaults = worker_defaults(env, gpus_per_worker)
    env_list = _env({**common, **defaults, **env}) + [_field(ev.DMLC_NODE_HOST, "status.podIP")]

    def job(job_name: str, count: int, role: Optional[str], gpus: int) -> dict:
        container = {"name": CONTAINER, "image": image, "env": env_list,
                     "command": container_command(command, num_servers, kvstore, role)}
        if role in (None, "scheduler"):
            container["ports"] = [{"containerPort": port, "name": "scheduler"}]
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        role_labels = {**labels, "gluondist.io/role": role} if role else labels
        spec = {
            "completions": count, "parallelism": count, "completionMode": "Indexed",
            "backoffLimit": 0, "podFailurePolicy": copy.deepcopy(FAIL_ON_ANY_ERROR),
            "template": {
                "metadata": {"labels": role_labels},
                "spec": {"restartPolicy": "Never", "subdomain": name,
                         "terminationGracePeriodSeconds": GRACE_SECONDS,
                         "containers": [container]},
            },
        }
        if active_deadline:
            spec["activeDeadlineSeconds"] = active_deadline
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": job_name, "labels": role_labels}, "spec": spec}

    if layout == "one-job":
        # one template: with GPUs, the scheduler and servers ask for them too
        jobs = [job(name, 1 + num_servers + num_workers, None, gpus_per_worker)]
    else:
        jobs = [job(f"{name}-scheduler", 1, "scheduler", 0),
                job(f"{name}-server", num_servers, "server", 0),
                job(f"{name}-worker", num_workers, "worker", gpus_per_worker)]
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"clusterIP": "None", "selector": labels,
                 "publishNotReadyAddresses": True,  # resolvable as soon as a pod runs
                 "ports": [{"name": "scheduler", "port": port, "targetPort": port}]},
    }
    return {"apiVersion": "v1", "kind": "List", "items": [service, *jobs]}
