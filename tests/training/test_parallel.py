"""gluondist.parallel's building blocks: contexts, split, and two contexts computing what
one does (cpu(0) and cpu(1) exercise the multi-device path)."""
import mxnet as mx
import numpy as np
import pytest

from gluondist import parallel, recipes
from conftest import mlp, param_sum, rel_diff


def test_contexts_forms():
    assert parallel.contexts() == [mx.cpu()]  # no GPU here
    assert parallel.contexts(2) == [mx.cpu(0), mx.cpu(1)]
    assert parallel.contexts("cpu:0,cpu:1") == [mx.cpu(0), mx.cpu(1)]
    assert parallel.contexts([mx.cpu(0), mx.cpu(1)]) == [mx.cpu(0), mx.cpu(1)]
    assert parallel.contexts(mx.cpu(1)) == [mx.cpu(1)]


@pytest.mark.parametrize("ctx,message", [
    (0, "at least one"), ("gpu:0", "0 GPU"), ([0, 1], "0 GPU"), ("tpu:0", "cannot read"),
    ([], "at least one"), (True, "must be"),
])
def test_contexts_rejects_what_is_not_there(ctx, message):
    with pytest.raises(ValueError, match=message):
        parallel.contexts(ctx)


@pytest.mark.parametrize("n,expected", [(10, [4, 3, 3]), (7, [3, 2, 2]), (2, [1, 1, None]),
                                        (1, [1, None, None])])
def test_split_handles_uneven_and_tiny_batches(n, expected):
    ctxs = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    data = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    parts = parallel.split(data, ctxs)
    assert [None if p is None else p.shape[0] for p in parts] == sorted(
        expected, key=lambda v: -1 if v is None else -v)
    kept = [p for p in parts if p is not None]
    assert np.array_equal(np.concatenate([p.asnumpy() for p in kept]), data)
    assert [p.context for p in kept] == ctxs[:len(kept)]
    nd_parts = parallel.split(mx.nd.array(data), ctxs)
    assert [p is None for p in nd_parts] == [p is None for p in parts]


def _train(ctxs, X, y, batch):
    net = mlp()
    losses = recipes.train_data_parallel(net, X, y, ctx=ctxs, epochs=2, batch_size=batch,
                                          optimizer_params={"learning_rate": 0.1,
                                                            "momentum": 0.9})
    return net, losses


@pytest.mark.parametrize("batch", [64, 37, 3])
def test_two_contexts_compute_what_one_does(digits, batch):
    X, y = digits[0][:300], digits[1][:300]
    one, l1 = _train([mx.cpu(0)], X, y, batch)
    two, l2 = _train([mx.cpu(0), mx.cpu(1)], X, y, batch)
    assert rel_diff(param_sum(one), param_sum(two)) <= 1e-4
    assert np.allclose(l1, l2, rtol=1e-4)
    # every context holds the same parameters
    for p in two.collect_params().values():
        assert np.allclose(p.data(mx.cpu(0)).asnumpy(), p.data(mx.cpu(1)).asnumpy())


def test_more_devices_than_samples_still_steps_everywhere(digits):
    X, y = digits[0][:10], digits[1][:10]
    one, _ = _train([mx.cpu(0)], X, y, 2)  # batches of 2 across 3 devices
    three, _ = _train([mx.cpu(0), mx.cpu(1), mx.cpu(2)], X, y, 2)
    assert rel_diff(param_sum(one), param_sum(three)) <= 1e-4


def test_initialize_moves_an_initialised_net_keeping_values():
    net = mlp()
    net.initialize(mx.init.Xavier())
    net(mx.nd.ones((1, 64)))
    before = param_sum(net)
    parallel.initialize(net, [mx.cpu(0), mx.cpu(1)])
    assert net.collect_params().list_ctx() == [mx.cpu(0), mx.cpu(1)]
    assert param_sum(net) == before
