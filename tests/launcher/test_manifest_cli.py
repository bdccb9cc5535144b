"""`gluondist manifest kubernetes` as a command: bad input in one line, the committed example
is what it writes, and the docs' command as the page gives it writes valid objects (the
objects themselves: unit/test_kubernetes_manifests.py)."""
import json

import docpages

import pytest

from conftest import ROOT, run_cli


def manifest_cli(*args):
    return run_cli("manifest", "kubernetes", *args)


@pytest.mark.parametrize("args,message", [
    (["--image", "i", "--name", "Bad_Name", "python"], "must be a DNS-1035 label"),
    (["--image", "i", "--name", "1job", "python"], "--name '1job' must be a DNS-1035 label"),
    (["--image", "i", "--name", "job-", "python"], "must be a DNS-1035 label"),
    (["--image", "i", "--name", "a" * 43, "python"], "at most 42 characters"),
    (["--image", "", "python"], "--image '' must be an image reference"),
    (["--image", "my image:tag", "python"], "non-empty and without whitespace"),
    (["--image", "img:1\n", "python"], "without whitespace"),
    (["--name", "x", "python"], "Missing option '--image'"),
    (["--image", "i", "-n", "0", "python"], "0 is not in the range x>=1"),
])
def test_manifest_bad_input(args, message):
    proc = manifest_cli(*args)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_committed_example_is_what_the_command_writes():
    proc = manifest_cli("-n", "2", "-s", "1", "--image", "gluondist:latest", "--name", "digits",
                        "--", "python", "examples/digits.py", "--epochs", "15")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(
        (ROOT / "launch" / "kubernetes" / "digits.json").read_text())


def test_the_kubernetes_manifest_command_writes_valid_objects(tmp_path):
    import kubernetes_validate
    [command] = docpages.commands(docpages.block("docs/multi-host.md",
                                                 "gluondist manifest kubernetes"))
    code, _, err, _ = docpages.shell(command, tmp_path)
    assert code == 0, err
    objects = json.loads((tmp_path / "job.json").read_text())["items"]
    assert [o["kind"] for o in objects] == ["Service", "Job"]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.30.0", strict=True)
    assert objects[1]["spec"]["completions"] == 1 + 2 + 4

