"""Gradients compressed on the wire (gluondist.kv.compression), in one process: the values
and their refusals in one line, and exact allreduce bits (real jobs:
e2e/test_compression_jobs.py)."""
import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist.kv import compression as cmp
from gluondist.kv.kinds import Mode


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


