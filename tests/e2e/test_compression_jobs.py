"""Each wire compression in a real 2-worker job against a one-process reference of the same
arithmetic (the refusals and the arithmetic alone: unit/test_compression.py)."""
import json

import numpy as np

from conftest import SCRIPTS

THRESHOLD = 0.05


def test_each_compression_in_a_two_worker_job(launch, tmp_path):
    """One job (2-bit is the process's kvstore's for good, so fp16 comes first)."""
    job = launch("-n", 2, "-s", 1, SCRIPTS / "compression_job.py", tmp_path, THRESHOLD)
    assert job.wait(timeout=240) == 0, job.err
    found = dict(np.load(tmp_path / "result.npz"))
    notes = json.loads((tmp_path / "result.json").read_text())
    for kind in ("fp16", "2bit"):  # the job's three steps are the reference's, bit for bit
        assert np.array_equal(found[f"{kind}.job"], found[f"{kind}.ref"]), kind
        assert not np.array_equal(found[f"{kind}.ref"], found["plain.ref"]), kind  # compressed
    names = [k[len("fp16.0."):] for k in found if k.startswith("fp16.0.")]
    assert len(names) == 4
    for name in names:
        for kind in ("fp16", "2bit"):  # 75 chunks of 4 KiB, each its own residual
            assert np.array_equal(found[f"{kind}.4096.{name}"], found[f"{kind}.0.{name}"])
        assert np.array_equal(found[f"fp16.resumed.{name}"], found[f"fp16.straight.{name}"])
    assert not np.array_equal(found["2bit.0.0.weight"], found["fp16.0.0.weight"])
    assert notes["overflow"].startswith("compression='fp16' overflowed: a gradient element")
    assert notes["untouched"] == np.float32(0.1)  # refused before the update
    assert notes["own_loop"].startswith("compression='fp16' overflowed: a gradient element")
    assert notes["own_loop_untouched"]  # trainer.step refuses it before its update too
    assert notes["float16"].startswith("compression='fp16' sends float32 gradients as float16, "
                                       "and parameter ") and "is float16: cast" in notes["float16"]
    assert notes["differ"].startswith("workers gave different compression=; every worker")
    # allreduce stays exact under 2-bit (fit's metrics and checks use it)
    assert notes["allreduce"] == [(1 + 2 ** -40) * 2, 0.25 + 1.25, -6e300]
    assert notes["float64"].startswith("compression='2bit' is MXNet's for float32 arrays only, "
                                       "and parameter ") and "is float64: cast" in notes["float64"]
    assert notes["refused"].startswith("this process's kvstore compresses every push with 2bit "
                                       "(threshold 0.05)")
