"""gluondist.parallel's building blocks: contexts, split, and two contexts computing what
one does (cpu(0) and cpu(1) exercise the multi-device path)."""
import mxnet as mx
import numpy as np
import pytest

from gluondist import parallel, recipes
from conftest import assert_same_params, mlp, params_of


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


def _train(ctxs, X, y, batch, epochs=2):
    net = mlp()
    losses = recipes.train_data_parallel(net, X, y, ctx=ctxs, epochs=epochs, batch_size=batch,
                                          optimizer_params={"learning_rate": 0.1,
                                                            "momentum": 0.9})
    return net, losses


# Batches of 3 take one epoch: their 100 steps end 1e-6 apart (the two sum a batch's gradient
# in another order: 1e-8 after one step), but lr 0.1 and momentum 0.9 on 3 samples amplify
# that rounding to 1e-3 by step 200 (measured per array), so 2 epochs would test the noise.
@pytest.mark.parametrize("batch,epochs", [(64, 2), (37, 2), (3, 1)])
def test_two_contexts_compute_what_one_does(digits, batch, epochs):
    X, y = digits[0][:300], digits[1][:300]
    one, l1 = _train([mx.cpu(0)], X, y, batch, epochs)
    two, l2 = _train([mx.cpu(0), mx.cpu(1)], X, y, batch, epochs)
    assert_same_params(two, one, 1e-4)
    assert np.allclose(l1, l2, rtol=1e-4)
    # every context holds the same parameters
    for p in two.collect_params().values():
        assert np.allclose(p.data(mx.cpu(0)).asnumpy(), p.data(mx.cpu(1)).asnumpy())


def test_more_devices_than_samples_still_steps_everywhere(digits):
    X, y = digits[0][:10], digits[1][:10]
    one, _ = _train([mx.cpu(0)], X, y, 2)  # batches of 2 across 3 devices
    three, _ = _train([mx.cpu(0), mx.cpu(1), mx.cpu(2)], X, y, 2)
    assert_same_params(three, one, 1e-4)


def test_initialize_moves_an_initialised_net_keeping_values():
    net = mlp()
    net.initialize(mx.init.Xavier())
    net(mx.nd.ones((1, 64)))
    before = params_of(net)
    parallel.initialize(net, [mx.cpu(0), mx.cpu(1)])
    assert net.collect_params().list_ctx() == [mx.cpu(0), mx.cpu(1)]
    assert_same_params(net, before)


def test_a_stand_in_pass_leaves_batchnorm_statistics_as_they_were():
    """A device without a part of the batch, and a worker's empty share (scale 0), run a
    stand-in sample for fresh zero gradients; MXNet's BatchNorm would fold that sample into
    its running statistics in backward. A device that had a part moves them as usual."""
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(4), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(2))
    net.hybridize()
    ctxs = [mx.cpu(0), mx.cpu(1)]
    parallel.initialize(net, ctxs, sample=mx.nd.ones((1, 3)))
    stats = [p for p in net.collect_params().values() if p.grad_req == "null"]

    def kept(ctx):
        return [p.data(ctx).asnumpy() for p in stats]

    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = mx.nd.array(np.random.RandomState(0).rand(2, 3)), mx.nd.array([0, 1])
    before = kept(mx.cpu(0))
    parallel.forward_backward(net, loss, [x, None], [y, None], ctxs)
    after = kept(mx.cpu(0))
    assert all(np.array_equal(a, b) for a, b in zip(kept(mx.cpu(1)), before))  # the stand-in
    assert not all(np.array_equal(a, b) for a, b in zip(after, before))  # the real part
    parallel.forward_backward(net, loss, [x[:1], x[1:]], [y[:1], y[1:]], ctxs, scale=0.0)
    assert all(np.array_equal(a, b) for a, b in zip(kept(mx.cpu(0)), after))
    assert all(p.grad(mx.cpu(0)).norm().asscalar() == 0 for p in net.collect_params().values()
               if p.grad_req != "null")


def test_before_backward_sees_the_forward_pass_and_no_gradient_yet():
    """fit's NaN check runs there: the losses are read, the gradients are not yet made (the
    pushes issued after backward must not wait behind a read of them)."""
    from gluondist import _mx
    net = mlp()
    ctxs = [mx.cpu(0), mx.cpu(1)]
    parallel.initialize(net, ctxs, sample=mx.nd.ones((1, 64)))
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = mx.nd.array(np.random.RandomState(0).rand(4, 64)), mx.nd.array([0, 1, 2, 3])
    seen = []

    def before_backward(outputs, losses):
        weights = [d for p in net.collect_params().values() for d in p.list_data()]
        seen.append(([l.shape for l in losses], any(_mx.fresh(w) for w in weights)))

    outputs, losses = parallel.forward_backward(net, loss, parallel.split(x, ctxs),
                                                parallel.split(y, ctxs), ctxs,
                                                before_backward=before_backward)
    assert seen == [([(2,), (2,)], False)]
    assert all(_mx.fresh(d) for p in net.collect_params().values() for d in p.list_data())
