"""fit's rules in a real 2-worker job: shards of different lengths fail at once on every
worker, naming each rank's count; fits in a row on one checkpoint_dir never race rank 0's
write."""
import json
import time

import pytest

from conftest import SCRIPTS

pytestmark = pytest.mark.slow
SCRIPT = str(SCRIPTS / "fit_rules_job.py")


def test_shards_of_different_lengths_fail_quickly_on_every_worker(launch, tmp_path):
    """Also evaluate's shards, and fit calls that differ in epochs or seed."""
    started = time.monotonic()
    job = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, "shard")
    assert job.wait(timeout=120) == 1, job.err
    assert time.monotonic() - started < 60  # not a hang, not the stall timeout
    line = ("the workers hold different data (train_data samples: worker 0 129, worker 1 128); "
            "pass the whole dataset on every worker")
    for rank in (0, 1):
        assert (tmp_path / f"{rank}.error").read_text().startswith(line), rank
    assert f"ValueError: {line}" in job.err
    for rank in (0, 1):
        assert (tmp_path / f"{rank}.evaluate").read_text().startswith(
            "the workers called evaluate with different data (data samples: worker 0 129, "
            "worker 1 128)")
        assert (tmp_path / f"{rank}.epochs").read_text() == (
            "the workers called fit with different settings (epochs: worker 0 2, worker 1 3); "
            "every worker must make the same fit call")
        assert (tmp_path / f"{rank}.seed").read_text().startswith(
            "the workers called fit with different settings (seed (-1: none): worker 0 0, "
            "worker 1 1)")
        assert (tmp_path / f"{rank}.lr").read_text().startswith(
            "the workers called fit with different settings (optimizer and its settings (a "
            "checksum): worker 0 ")
        assert (tmp_path / f"{rank}.evenshard").read_text().startswith(
            "the workers hold different data (train_data rows (a checksum): worker 0 ")
    assert job.leftovers() == []


@pytest.mark.parametrize("round_", range(2))
@pytest.mark.parametrize("kind", ["dist_sync", "dist_async"])
def test_fits_in_a_row_on_one_checkpoint_dir_agree_on_the_checkpoint(launch, tmp_path, kind,
                                                                     round_):
    # without the wait for rank 0's write, a worker found an older checkpoint in every run tried
    job = launch("-n", 2, "-s", 1, "--kvstore", kind, SCRIPT, tmp_path, "refit")
    assert job.wait(timeout=300) == 0, job.err
    for rank in (0, 1):  # each fit resumed the previous one's last epoch, on every worker
        assert json.loads((tmp_path / f"{rank}.done").read_text()) == [0, 1, 2, 3, 4], rank
    assert job.leftovers() == []
