"""Chunked gradients in a real 2-worker job: bit-equal to sending them whole (the chunking
itself, in one process, is training/test_chunks.py)."""
import numpy as np

from conftest import SCRIPTS


def test_chunked_training_is_bit_equal_to_whole(launch, tmp_path):
    """Two workers, two servers (the chunks spread over both), two fits whole and then two in
    69 chunks (the default's 2 take the same path) in one job, each fit on keys of its own."""
    job = launch("-n", 2, "-s", 2, SCRIPTS / "chunked_job.py", tmp_path, "0", "16384")
    assert job.wait(timeout=180) == 0, job.err
    found = {chunk: dict(np.load(tmp_path / f"params.{chunk}.npz")) for chunk in ("0", "16384")}
    assert len(found["0"]) == 8 and found["16384"].keys() == found["0"].keys()
    for name, value in found["0"].items():
        assert np.array_equal(found["16384"][name], value), name
