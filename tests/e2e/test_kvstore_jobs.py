"""Allreduce of long vectors in real jobs with 3 and 4 servers: every key stays on a server
(the key arithmetic in one process: training/test_kvstore.py)."""
import json

import pytest

from conftest import SCRIPTS


@pytest.mark.parametrize("servers,fit", [(3, False), (4, True)])
def test_allreduce_of_long_vectors_with_several_servers(launch, tmp_path, servers, fit):
    # 120,002 values is what fit averages for a Dense(60001) + BatchNorm net: with keys
    # 2**30 + n it crashed MXNet ("ps_key < krs[server].end()") with 3 or 4 servers.
    script = SCRIPTS / "big_allreduce.py"
    job = launch("-n", 2, "-s", servers, "--start-timeout", 60, script, tmp_path,
                 *(["fit"] if fit else []))
    assert job.wait(180) == 0, job.err
    results = [json.loads((tmp_path / f"result.{r}.json").read_text()) for r in range(2)]
    for result in results:
        assert all(result["allreduce"].values()), result
    if fit:
        assert len(results[0]["fit"]) == 3  # the loss, running_mean and running_var
        for key, value in results[0]["fit"].items():  # the statistics were averaged alike
            assert results[1]["fit"][key] == value, key
