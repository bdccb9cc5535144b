"""Strategies as registered classes (issue 33): a parallel mode and a wire format, each added
in one module through its public call and trained through fit in one process; and
dist_async's per-worker clipping as the docs say it (a real job:
e2e/test_registered_wire_job.py)."""
import importlib.util

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import devices, kvstore, parallel
from gluondist.bench.model import WIRE
from gluondist.kv import compression as cmp
from gluondist.kv.kinds import Mode

from conftest import ROOT, SCRIPTS, mlp


class FirstDevice(parallel.ParallelMode):
    """A mode added in one class: the net on the first of the devices given, alone."""

    name = "first"
    description = "the net on the first device only"

    def copies(self, ctxs):
        return 1

    def prepare(self, args, ctxs, train, batch_size):
        devices.initialize(args.net, ctxs[:1])
        return args.net, ctxs[:1]


@pytest.fixture
def first_mode():
    parallel.register_mode(FirstDevice)
    try:
        yield FirstDevice
    finally:  # the registry is the process's: later tests see the built-in modes alone
        del parallel.MODES[FirstDevice.name]


@pytest.fixture
def exact_wire():
    """tests/scripts/exact_wire.py, the format the job below trains with, registered here."""
    spec = importlib.util.spec_from_file_location("exact_wire", SCRIPTS / "exact_wire.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        yield module.Exact
    finally:  # the registry is the process's: later tests see the built-in formats alone
        del cmp.REGISTRY["exact"]


def data(n=48, seed=0):
    rs = np.random.RandomState(seed)
    return rs.rand(n, 6).astype(np.float32), rs.randint(0, 10, n).astype(np.float32)


def weights(net):
    return [p.data(p.list_ctx()[0]).asnumpy() for p in net.collect_params().values()]


def test_a_mode_registered_in_one_class_trains_through_fit(first_mode):
    X, y = data()
    mine, one = mlp(8), mlp(8)
    kw = dict(epochs=2, batch_size=12, seed=4, progress=False,
              optimizer_params={"learning_rate": 0.1})
    gluondist.fit(mine, (X, y), ctx=[mx.cpu(0), mx.cpu(1)], parallel="first", **kw)
    gluondist.fit(one, (X, y), ctx=[mx.cpu(0)], **kw)
    assert {str(c) for p in mine.collect_params().values() for c in p.list_ctx()} == {"cpu(0)"}
    for a, b in zip(weights(mine), weights(one)):  # the first device alone: as one device
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"^parallel must be 'data' \(each device a copy of "
                                         r"the net\), 'pipeline' \(.*\) or 'first' \(the net on "
                                         r"the first device only\), not 'firsts'$"):
        gluondist.fit(mine, (X, y), parallel="firsts", progress=False)


def test_register_mode_refuses_what_is_not_a_mode_or_a_taken_name():
    class Data(parallel.ParallelMode):
        name = "data"

    with pytest.raises(ValueError, match=r"^parallel mode 'data' is DataParallel already; "
                                         r"give Data another name$"):
        parallel.register_mode(Data)
    with pytest.raises(ValueError, match=r"^register_mode takes a subclass of ParallelMode"):
        parallel.register_mode(object)
    assert type(parallel.mode("data")) is parallel.DataParallel  # untouched
    assert type(parallel.mode_of(parallel.Pipeline(mlp(4), [mx.cpu(0), mx.cpu(1)],
                                                   sample=np.zeros((1, 6), np.float32)))) \
        is parallel.PipelineParallel


def test_a_pipeline_trainer_comes_from_make_trainer():
    pipe = parallel.Pipeline(mlp(4), [mx.cpu(0), mx.cpu(1)], sample=np.zeros((1, 6), np.float32))
    assert kvstore.make_trainer(pipe, kvstore=None).exchange.updates.stages
    assert not hasattr(pipe, "make_trainer")  # the trainer does not reach up from here


def test_a_wire_format_registered_in_one_module_is_known_everywhere(exact_wire):
    assert cmp.parse("exact") == exact_wire() and cmp.lookup("exact") is exact_wire
    assert WIRE["exact"] == (4.0, 4.0)  # the bench's cost model reads its widths
    cmp.check_mode(cmp.parse({"type": "exact"}), Mode("dist_sync"))
    with pytest.raises(ValueError, match=r"^compression='exact' compresses .*kvstore 'local'"):
        cmp.check_mode(cmp.parse("exact"), Mode("local"))
    with pytest.raises(ValueError, match=r"^compression must be None, 'fp16', '2bit', 'exact' "
                                         r"or \{'type': '2bit', 'threshold': T\}, not 'inexact'$"):
        cmp.parse("inexact")

    class Other(cmp.Compression):
        name = "exact"

    with pytest.raises(ValueError, match=r"^compression 'exact' is Exact already; give Other "
                                         r"another name$"):
        cmp.register(Other)


def test_the_wire_registry_holds_the_formats_that_were_strings():
    assert [cmp.lookup(n) for n in ("none", "fp16", "2bit")] == \
        [cmp.Compression, cmp.FP16, cmp.TwoBit]
    assert dict(WIRE) == {"none": (4.0, 4.0), "fp16": (2.0, 2.0), "2bit": (0.25, 4.0)}
    assert (cmp.FP16.key_factor, cmp.TwoBit.kvstore_wide, cmp.FP16.whole_as_is) == \
        (2, True, False)
    assert cmp.parse("2bit") != cmp.parse({"type": "2bit", "threshold": 0.25})
    assert cmp.parse("2bit").code != cmp.parse({"type": "2bit", "threshold": 0.25}).code


def test_dist_async_clips_each_workers_own_gradient():
    """TrainStep's dist_async step on a trainer without a kvstore: it applies this worker's
    clipped gradient locally, as a server would apply its push."""
    net = mx.gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Constant(0.5))
    trainer = kvstore.make_trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                   kvstore=None)
    batch, clip = 8, 0.01
    step = kvstore.TrainStep(trainer, None, [mx.cpu()], batch, clip=clip)
    step.async_mode = True  # as TrainStep over a dist_async kvstore, whose servers update
    assert step.loss_scale(batch // 2) == 2.0
    X = mx.nd.array(np.random.RandomState(1).rand(batch, 4))
    before = [p.data().copy() for p in net.collect_params().values()]
    with mx.autograd.record():
        loss = (net(X) ** 2).sum(axis=1) * step.loss_scale(batch)
    loss.backward()
    grads = [p.grad().asnumpy() for p in net.collect_params().values()]
    norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads)) / batch
    assert norm > clip  # this worker's mean gradient is clipped
    step(batch * 2)  # the global count (2 workers) plays no part in dist_async's update
    moved = [(b - p.data()).asnumpy() / 0.1 for b, p in zip(before, net.collect_params().values())]
    applied = np.sqrt(sum((m.astype(np.float64) ** 2).sum() for m in moved))
    np.testing.assert_allclose(applied, clip, rtol=1e-4)
    for m, g in zip(moved, grads):  # in the direction of this worker's own gradient
        np.testing.assert_allclose(m, g / batch * clip / norm, rtol=1e-4, atol=1e-7)


def test_the_docs_say_what_dist_async_clips():
    own_loop = " ".join((ROOT / "docs" / "own-loop.md").read_text().split())
    assert "under `dist_async`, where no worker sees the others' gradients at step time, each " \
           "worker clips its own gradient before pushing it" in own_loop
    assert "clips the global gradient norm" not in own_loop
    for doc in (kvstore.TrainStep.__doc__, devices.clip_global_norm.__doc__,
                gluondist.fit.__doc__):
        assert "dist_async" in doc and "own" in " ".join(doc.split()), doc[:60]
