"""gluondist's Kubernetes manifests: valid objects (kubernetes-validate), one indexed Job or
per-role Jobs, GPUs for workers only, the help and the Python call's checks (the command:
launcher/test_manifest_cli.py)."""

import kubernetes_validate
import pytest

from gluondist.launcher.kubernetes import kubernetes

K8S = "1.30.0"


def by_kind(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects["items"]}


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("version", ["1.26.0", "1.28.0", K8S])  # podFailurePolicy: 1.26+
@pytest.mark.parametrize("layout", ["one-job", "per-role"])
def test_every_object_is_valid_kubernetes(layout, version):
    for item in kubernetes("job", "img:1", ["python", "t.py"], 4, 2, gpus_per_worker=2,
                           layout=layout, active_deadline=3600)["items"]:
        kubernetes_validate.validate(item, version, strict=True)


def test_the_validator_catches_mistakes():
    job = by_kind(kubernetes("job", "img", ["python"], 1, 1))[("Job", "job")]
    job["spec"]["template"]["spec"]["containrs"] = job["spec"]["template"]["spec"].pop("containers")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S, strict=True)


def test_one_indexed_job_that_fails_whole_on_any_nonzero_exit():
    objects = by_kind(kubernetes("train", "img:1", ["python", "t.py", "--x"], 4, 2, port=9000,
                                 kvstore="dist_async", gpus_per_worker=1, env={"A": "b"}))
    service, job = objects[("Service", "train")], objects[("Job", "train")]
    spec = job["spec"]
    pod = spec["template"]["spec"]
    assert (spec["completions"], spec["parallelism"], spec["completionMode"]) == (7, 7, "Indexed")
    assert spec["podFailurePolicy"] == {"rules": [{
        "action": "FailJob", "onPodConditions": [],
        "onExitCodes": {"containerName": "gluondist", "operator": "NotIn", "values": [0]}}]}
    assert (pod["restartPolicy"], pod["subdomain"]) == ("Never", "train")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == spec["template"]["metadata"]["labels"]
    (container,) = pod["containers"]
    assert container["command"] == [
        "python", "-m", "gluondist.launcher.child.pod", "--servers", "2", "--kvstore", "dist_async",
        "--", "python", "t.py", "--x"]
    assert env_of(container) == {
        "DMLC_PS_ROOT_URI": "train-0.train", "DMLC_PS_ROOT_PORT": "9000",
        "DMLC_NUM_WORKER": "4", "DMLC_NUM_SERVER": "2", "DMLC_USE_KUBERNETES": "1", "A": "b",
        "DMLC_NODE_HOST": {"fieldRef": {"fieldPath": "status.podIP"}}}  # GPUs: bulking kept
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


@pytest.mark.parametrize("env,value", [
    ({}, "0"), ({"MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD": "15"}, "15"),
    ({"MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN": "8"}, None)])
def test_workers_run_backward_unbulked_unless_the_user_chose(env, value):
    objects = by_kind(kubernetes("train", "img:1", ["python", "t.py"], 2, 1, env=env))
    (container,) = objects[("Job", "train")]["spec"]["template"]["spec"]["containers"]
    assert env_of(container).get("MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD") == value


def test_per_role_jobs_give_gpus_to_workers_only():
    objects = by_kind(kubernetes("train", "img:1", ["python3", "t.py"], 4, 2, gpus_per_worker=1,
                                 layout="per-role", active_deadline=600))
    assert sorted(objects) == [("Job", "train-scheduler"), ("Job", "train-server"),
                               ("Job", "train-worker"), ("Service", "train")]
    for role, count in (("scheduler", 1), ("server", 2), ("worker", 4)):
        spec = objects[("Job", f"train-{role}")]["spec"]
        (container,) = spec["template"]["spec"]["containers"]
        assert spec["completions"] == count and spec["activeDeadlineSeconds"] == 600
        assert container["command"] == [
            "python3", "-m", "gluondist.launcher.child.pod", "--servers", "2", "--kvstore",
            "dist_sync", "--role", role, "--", "python3", "t.py"]
        assert env_of(container)["DMLC_PS_ROOT_URI"] == "train-scheduler-0.train"
        assert ("resources" in container) == (role == "worker")
        assert spec["podFailurePolicy"]["rules"][0]["action"] == "FailJob"


def test_the_gpu_help_says_which_pods_get_the_limit():
    # issue 36, defect 6: it said CUDA_VISIBLE_DEVICES (launch's help), which a manifest never
    # sets; one Job has one pod template, so there the scheduler and servers get GPUs too
    from click.testing import CliRunner

    from gluondist.cli import cli
    out = CliRunner().invoke(cli, ["manifest", "kubernetes", "--help"])
    assert out.exit_code == 0 and "CUDA_VISIBLE_DEVICES" not in out.output
    (option,) = [p for p in cli.commands["manifest"].commands["kubernetes"].params
                 if p.name == "gpus_per_worker"]
    assert "nvidia.com/gpu" in option.help and "one-job" in option.help, option.help
    assert "servers" in option.help and "per-role" in option.help, option.help


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_workers=0), "-n/--num-workers must be a whole number, at least 1, got 0"),
    (dict(num_servers=-1), "-s/--num-servers must be a whole number, at least 1, got -1"),
    (dict(gpus_per_worker=-2), "--gpus-per-worker must be a whole number, at least 0, got -2"),
    (dict(kvstore="local"), "--kvstore 'local' is not a distributed kind; use one of"),
    (dict(layout="two-jobs"), "--layout 'two-jobs' is not one of"),
    (dict(port=70000), r"--port must be a whole number, 1..65535, got 70000"),
    (dict(active_deadline=-5), "--active-deadline must be a whole number, at least 1, got -5"),
    (dict(env={"A=B": "1"}), "--env 'A=B'='1': write KEY=VALUE"),
    (dict(command=()), "the container's command must be a list of non-empty strings"),
    (dict(command="python train.py"), "must be a list of non-empty strings"),
    (dict(command=["python", None]), "must be a list of non-empty strings"),
    (dict(active_deadline=0), "--active-deadline must be a whole number, at least 1, got 0"),
    (dict(name=5), "--name and --image must be strings"),
    (dict(env=["A=B"]), "env must be a dict"),
])
def test_the_python_call_checks_what_the_cli_checks(kwargs, message):
    from gluondist.launcher.errors import LaunchError
    args = dict(name="job", image="img", command=["python", "t.py"], num_workers=2,
                num_servers=1)
    with pytest.raises(LaunchError, match=message):
        kubernetes(**{**args, **kwargs})
