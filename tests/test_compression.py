"""Gradients compressed on the wire (gluondist.kv.compression): each kind in a real 2-worker
job against a one-process reference of the same arithmetic, chunked equal to whole, an exact
resume, and every refusal in one line."""
import json

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist.kv import compression as cmp
from gluondist.kv.kinds import Mode

from conftest import SCRIPTS

THRESHOLD = 0.05


@pytest.mark.parametrize("value, message", [
    ("3bit", r"^compression must be None, 'fp16', '2bit' or \{'type': '2bit', 'threshold': T\}, "
             r"not '3bit'$"),
    ({"type": "1bit"}, r"^compression must be .*not \{'type': '1bit'\}$"),
    ({"type": "2bit", "threshold": 0}, r"^compression: 2bit's threshold must be a positive "
                                       r"number, not 0$"),
    ({"type": "2bit", "threshold": -0.5}, r"threshold must be a positive number, not -0.5$"),
    ({"type": "2bit", "threshold": float("nan")}, r"threshold must be a positive number, not nan"),
    ({"type": "2bit", "threshold": True}, r"threshold must be a positive number, not True$"),
    ({"type": "fp16", "threshold": 1}, r"^compression \{.*\}: unknown key\(s\) \['threshold'\] "
                                       r"for 'fp16'$"),
])
def test_bad_values_are_refused_in_one_line(value, message):
    with pytest.raises(ValueError, match=message) as err:
        cmp.parse(value)
    assert "\n" not in str(err.value)


def test_values_and_the_default_threshold():
    assert cmp.parse(None) is None
    assert cmp.parse("none") is None  # float32, as None
    assert cmp.parse("fp16") == cmp.FP16()
    assert cmp.parse("2bit") == cmp.TwoBit(0.5)  # MXNet's default
    assert cmp.parse({"type": "2bit", "threshold": 2}).mxnet_params() == \
        {"type": "2bit", "threshold": 2.0}


@pytest.mark.parametrize("kind", ["fp16", "2bit"])
@pytest.mark.parametrize("mode, message", [
    (None, r"kvstore 'none' sends nothing there"),
    ("local", r"kvstore 'local' sends nothing there"),
    ("device", r"kvstore 'device' sends nothing there"),
    ("dist_async", r"with dist_async: "),
])
def test_modes_that_cannot_compress_are_refused(kind, mode, message):
    with pytest.raises(ValueError, match=message) as err:
        cmp.check_mode(cmp.parse(kind), None if mode is None else Mode(mode))
    assert "\n" not in str(err.value)
    cmp.check_mode(cmp.parse(kind), Mode("dist_sync"))  # what can


def test_fit_and_make_trainer_refuse_compression_outside_a_job():
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize()
    with pytest.raises(ValueError, match=r"^compression='fp16' .*kvstore 'none'"):
        gluondist.fit(net, (np.zeros((4, 3), np.float32), np.zeros(4, np.float32)),
                      compression="fp16", progress=False)
    with pytest.raises(ValueError, match=r"^compression='2bit' .*kvstore 'local'"):
        gluondist.kvstore.make_trainer(net.collect_params(), kvstore="local",
                                       compression="2bit")


def test_allreduce_bits_are_exact_for_any_float64():
    values = [np.array([1 + 2 ** -40, -3e300, 0.1, np.inf]), np.array([2.5, 1e-310, -0.1, 1])]
    # the servers' sum of every worker's table (2-bit sends each element exactly)
    summed = sum(cmp.encode_bits(v, rank, 2, THRESHOLD) for rank, v in enumerate(values))
    assert np.array_equal(cmp.decode_bits(summed, 4, 2, THRESHOLD), values[0] + values[1])


@pytest.mark.slow
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
    assert notes["float16"].startswith("compression='fp16' sends float32 gradients as float16, "
                                       "and parameter ") and "is float16: cast" in notes["float16"]
    assert notes["differ"].startswith("workers gave different compression=; every worker")
    # allreduce stays exact under 2-bit (fit's metrics and checks use it)
    assert notes["allreduce"] == [(1 + 2 ** -40) * 2, 0.25 + 1.25, -6e300]
    assert notes["refused"].startswith("this process's kvstore compresses every push with 2bit "
                                       "(threshold 0.05)")
