"""Plain Kubernetes objects for a parameter-server job: no operator needed (Kubeflow dropped
its MXJob operator in training-operator 1.9).

A headless Service names the scheduler Pod; servers and workers are Indexed Jobs. Every node
advertises its Pod IP (downward API), and a worker's rank is its completion index.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from . import envvars as ev

SERVER_COMMAND = ["python", "-c", "import mxnet"]


def _env(values: Dict[str, str]) -> List[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def kubernetes(name: str, image: str, command: Sequence[str], num_workers: int,
               num_servers: int, port: int = 9091, kvstore: str = "dist_sync",
               gpus_per_worker: int = 0, env: Optional[Dict[str, str]] = None) -> dict:
    """A ``v1 List`` of the objects to ``kubectl apply -f``."""
    labels = {"app.kubernetes.io/name": "gluondist", "gluondist.io/job": name}
    scheduler_host = f"{name}-scheduler"
    common = {
        ev.DMLC_PS_ROOT_URI: scheduler_host,
        ev.DMLC_PS_ROOT_PORT: str(port),
        ev.DMLC_NUM_WORKER: str(num_workers),
        ev.DMLC_NUM_SERVER: str(num_servers),
        # ps-lite binds the scheduler to 0.0.0.0 instead of its (Service) name when set
        ev.DMLC_USE_KUBERNETES: "1",
        **(env or {}),
    }

    def container(role: str, argv: Sequence[str], extra: List[dict], gpus: int = 0) -> dict:
        spec = {"name": role, "image": image, "command": list(argv),
                "env": _env({**common, ev.DMLC_ROLE: role}) + extra}
        if role == "scheduler":
            spec["ports"] = [{"containerPort": port, "name": "scheduler"}]
        if gpus:
            spec["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        return spec

    node_ip = [_field(ev.DMLC_NODE_HOST, "status.podIP")]

    def indexed_job(role: str, count: int, argv, extra, gpus=0) -> dict:
        role_labels = {**labels, "gluondist.io/role": role}
        return {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-{role}", "labels": role_labels},
            "spec": {
                "completions": count, "parallelism": count, "completionMode": "Indexed",
                "backoffLimit": 0,  # a failed worker fails the job: restart it whole
                "template": {
                    "metadata": {"labels": role_labels},
                    "spec": {"restartPolicy": "Never",
                             "containers": [container(role, argv, extra, gpus)]},
                },
            },
        }

    scheduler_labels = {**labels, "gluondist.io/role": "scheduler"}
    worker_env = node_ip + [
        _field(ev.GLUONDIST_RANK,
               "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
        {"name": ev.GLUONDIST_KVSTORE, "value": kvstore},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    items = [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": scheduler_host, "labels": labels},
         "spec": {"clusterIP": "None", "selector": scheduler_labels,
                  "publishNotReadyAddresses": True,  # resolvable as soon as it runs
                  "ports": [{"name": "scheduler", "port": port, "targetPort": port}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": scheduler_host, "labels": scheduler_labels},
         "spec": {"restartPolicy": "Never",
                  "containers": [container("scheduler", SERVER_COMMAND, node_ip)]}},
        indexed_job("server", num_servers, SERVER_COMMAND, node_ip),
        indexed_job("worker", num_workers, command, worker_env, gpus_per_worker),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}
