"""Chunked gradients updated chunk by chunk as their sums come back (gluondist.kv.updates):
bit-equal to one update after the last pull, for every optimizer it takes, on two devices,
through a real (local) kvstore; a real 2-worker job is e2e/test_chunk_jobs.py."""
import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist.kv.chunks import chunk_bounds
from gluondist import _mx
from gluondist.kv.exchange import Exchange
from gluondist.kv.staging import Staging
from gluondist.kv.trainer import TrainStep, Trainer
from gluondist.kv import updates
from gluondist.kv.updates import ELEMENTWISE, UPDATE_BYTES
from gluondist.trees import leaves

from conftest import ROOT, run_cli

CTXS = [mx.cpu(0), mx.cpu(1)]
SETTINGS = {"sgd": {"momentum": 0.9, "wd": 1e-3}, "nag": {"momentum": 0.9},
            "rmsprop": {"centered": True}}


def train(optimizer, monkeypatch, switch: str, dtype="float32", steps=3, clip=None):
    """Two parameters (the first, 3,000 elements, in 12 chunks of 1000 bytes) trained ``steps``
    steps with GLUONDIST_CHUNK_UPDATES=``switch``: the parameters, the optimizer's states and
    counts."""
    monkeypatch.setenv("GLUONDIST_CHUNK_UPDATES", switch)
    mx.random.seed(0)
    params = [mx.gluon.Parameter(name, shape=shape, dtype=dtype)
              for name, shape in (("w", (100, 30)), ("b", (3,)))]
    for p in params:
        p.initialize(mx.init.Normal(0.5), ctx=CTXS)
    sizes = [int(np.prod(p.shape)) for p in params]
    chunks = [chunk_bounds(n, np.dtype(dtype).itemsize, 1000) for n in sizes]
    opt_params = {"learning_rate": 0.05, "multi_precision": dtype == "float16",  # halves
                  "lr_scheduler": mx.lr_scheduler.FactorScheduler(2, 0.5, base_lr=0.05),
                  **SETTINGS.get(optimizer, {})}
    trainer = Trainer(params, optimizer, opt_params)  # as make_trainer makes it, in a job
    kv = mx.kv.create("local")
    trainer.exchange = Exchange(params, trainer.exchange.updates, kv, chunks=chunks,
                                staging=Staging(2, max(b - a for a, b in chunks[0])))
    if switch == "1":
        trainer.exchange.plan()
    trainer.exchange.join()
    step = TrainStep(trainer, kv, CTXS, batch_size=8, clip=clip)
    rs = np.random.RandomState(0)
    for _ in range(steps):
        for ctx in CTXS:
            x, z = (mx.nd.array(rs.randn(*p.shape), ctx=ctx, dtype=dtype) for p in params)
            with mx.autograd.record():  # elementwise: CPUs have no float16 matrix product
                loss = ((params[0].data(ctx) * x) ** 2).sum() + (params[1].data(ctx) * z).sum()
            loss.backward()
        step(8)
    updater = trainer.exchange.updates.updater(0)
    states = [s for i in sorted(updater.states) for s in leaves(updater.states[i])]
    opt = trainer.optimizer
    return step, ([p.data(c).asnumpy() for p in params for c in CTXS] +
                  [s.asnumpy() for s in states], _mx.count_tables(opt), opt.num_update)


# a chunk a group (12 updates of the first parameter a step), 3 (4 of them), all (1)
@pytest.mark.parametrize("update_bytes", [1000, 2500, UPDATE_BYTES])
@pytest.mark.parametrize("optimizer", [cls.__name__.lower() for cls in ELEMENTWISE])
def test_each_chunk_updated_as_it_lands_is_bit_equal_to_one_update(optimizer, update_bytes,
                                                                    monkeypatch):
    monkeypatch.setattr(updates, "UPDATE_BYTES", update_bytes)
    after, (arrays, counts, num) = train(optimizer, monkeypatch, "0")
    early, (chunked, early_counts, early_num) = train(optimizer, monkeypatch, "1")
    assert not after.chunk_updates and early.chunk_updates
    assert len(early.exchange.updates.groups) == {1000: 12, 2500: 4}.get(update_bytes, 1)
    assert len(arrays) == len(chunked)
    for a, b in zip(arrays, chunked):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    # once per step on each device, not once per chunk: the rate halved once, after 2 steps
    assert counts == early_counts == {0: {0: 3, 1: 3}, 1: {0: 3, 1: 3}}
    assert num == early_num == 3


def test_float16_weights_with_float32_master_copies_are_bit_equal(monkeypatch):
    monkeypatch.setattr(updates, "UPDATE_BYTES", 1000)
    _, (arrays, *_) = train("sgd", monkeypatch, "0", dtype="float16")
    early, (chunked, *_) = train("sgd", monkeypatch, "1", dtype="float16")
    assert early.chunk_updates
    for a, b in zip(arrays, chunked):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_where_the_result_would_change_every_parameter_waits_for_the_last_pull(monkeypatch):
    assert not train("sgd", monkeypatch, "1", clip=1.0)[0].chunk_updates  # a global norm
    assert not train("lamb", monkeypatch, "1")[0].chunk_updates  # norms per array
    assert not train("nadam", monkeypatch, "1")[0].chunk_updates  # a schedule per call


SAID = "GLUONDIST_CHUNK_UPDATES='yes': give 1 to update each chunk as its sum comes back, " \
    "or 0 to update after the last pull"


def test_the_switch_takes_only_0_or_1_in_any_process(monkeypatch):
    monkeypatch.setenv("GLUONDIST_CHUNK_UPDATES", "yes")
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize()
    with pytest.raises(ValueError) as raised:  # fit here runs without a kvstore
        gluondist.fit(net, (np.ones((8, 3), "f"), np.zeros(8, "f")), progress=False)
    assert str(raised.value) == SAID


def test_the_launcher_refuses_a_bad_switch_before_any_process_starts():
    proc = run_cli("launch", "-n", 2, "-s", 1, "--env", "GLUONDIST_CHUNK_UPDATES=yes",
                   "--dry-run", ROOT / "examples" / "digits.py")
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"gluondist: error: {SAID}\n")


def test_a_stale_gradient_is_refused_before_any_update(monkeypatch):
    step, _ = train("sgd", monkeypatch, "1", steps=1)
    before = [p.data(CTXS[0]).asnumpy() for p in step.exchange.params]
    with pytest.raises(UserWarning, match="has not been updated by backward"):
        step(8)  # no backward since the last step
    after = [p.data(CTXS[0]).asnumpy() for p in step.exchange.params]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert step.chunk_updates
