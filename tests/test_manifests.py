import json

import kubernetes_validate
import pytest

from gluondist.manifests import kubernetes
from conftest import ROOT, run_cli

K8S = "1.30.0"


def by_kind(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects["items"]}


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_every_object_is_valid_kubernetes():
    for item in kubernetes("job", "img:1", ["python", "t.py"], 4, 2, gpus_per_worker=2)["items"]:
        kubernetes_validate.validate(item, K8S, strict=True)


def test_the_validator_catches_mistakes():
    pod = by_kind(kubernetes("job", "img", ["python"], 1, 1))[("Pod", "job-scheduler")]
    pod["spec"]["containrs"] = pod["spec"].pop("containers")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S, strict=True)


def test_the_environment_is_wired_for_each_role():
    objects = by_kind(kubernetes("train", "img:1", ["python", "t.py", "--x"], 4, 2, port=9000,
                                 kvstore="dist_async", gpus_per_worker=1, env={"A": "b"}))
    service = objects[("Service", "train-scheduler")]
    scheduler = objects[("Pod", "train-scheduler")]["spec"]["containers"][0]
    servers = objects[("Job", "train-server")]
    workers = objects[("Job", "train-worker")]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == objects[("Pod", "train-scheduler")]["metadata"]["labels"]
    assert (servers["spec"]["completions"], workers["spec"]["completions"]) == (2, 4)
    common = {"DMLC_PS_ROOT_URI": "train-scheduler", "DMLC_PS_ROOT_PORT": "9000",
              "DMLC_NUM_WORKER": "4", "DMLC_NUM_SERVER": "2", "DMLC_USE_KUBERNETES": "1",
              "A": "b"}
    pod_ip = {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env_of(scheduler) == {**common, "DMLC_ROLE": "scheduler", "DMLC_NODE_HOST": pod_ip}
    server = servers["spec"]["template"]["spec"]["containers"][0]
    assert env_of(server) == {**common, "DMLC_ROLE": "server", "DMLC_NODE_HOST": pod_ip}
    worker = workers["spec"]["template"]["spec"]["containers"][0]
    assert env_of(worker) == {
        **common, "DMLC_ROLE": "worker", "DMLC_NODE_HOST": pod_ip,
        "GLUONDIST_RANK": {"fieldRef": {"fieldPath":
                           "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
        "GLUONDIST_KVSTORE": "dist_async", "PYTHONUNBUFFERED": "1"}
    assert worker["command"] == ["python", "t.py", "--x"]
    assert server["command"] == scheduler["command"] == ["python", "-c", "import mxnet"]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert scheduler["ports"] == [{"containerPort": 9000, "name": "scheduler"}]


def manifest_cli(*args):
    return run_cli("manifest", "kubernetes", *args)


def test_the_committed_example_is_what_the_command_writes():
    proc = manifest_cli("-n", "2", "-s", "1", "--image", "gluondist:latest", "--name", "digits",
                        "--", "python", "examples/digits.py", "--epochs", "15")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(
        (ROOT / "launch" / "kubernetes" / "digits.json").read_text())


@pytest.mark.parametrize("args,message", [
    (["--image", "i", "--name", "Bad_Name", "python"], "must be a DNS label"),
    (["--name", "x", "python"], "Missing option '--image'"),
    (["--image", "i", "-n", "0", "python"], "0 is not in the range x>=1"),
])
def test_manifest_bad_input(args, message):
    proc = manifest_cli(*args)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
