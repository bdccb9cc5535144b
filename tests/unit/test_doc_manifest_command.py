"""The docs' Kubernetes manifest command, as the page gives it, writes valid objects."""
import json


import docpages


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
