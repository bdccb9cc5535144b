"""A wire format registered in one module trains through fit in a real 2-worker job (the
registries in one process: training/test_registries.py)."""
import json

import numpy as np

from conftest import SCRIPTS


def test_fit_with_a_registered_wire_format_in_a_two_worker_job(launch, tmp_path):
    """float32 on keys of its own, staged and landed by the registered class: bit-equal to
    fit without compression, whole and in chunks."""
    job = launch("-n", 2, "-s", 1, SCRIPTS / "registered_wire_job.py", tmp_path)
    assert job.wait(timeout=240) == 0, job.err
    found = dict(np.load(tmp_path / "result.npz"))
    staged = json.loads((tmp_path / "result.json").read_text())
    names = [k[len("none."):] for k in found if k.startswith("none.")]
    assert len(names) == 4
    for name in names:
        assert np.array_equal(found[f"exact.{name}"], found[f"none.{name}"]), name
        assert np.array_equal(found[f"chunked.{name}"], found[f"none.{name}"]), name
    # 8 steps of 4 gradients, and in chunks the 10 KiB weight in 3 of 4 KiB: its wire ran
    assert staged == {"whole": 32, "chunked": 48}
