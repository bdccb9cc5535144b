"""gluondist.parallel.Pipeline, the building block: stages on CPU contexts (cpu(0), cpu(1), ...
exercise the multi-device path), exact against one context, and its refusals."""
import mxnet as mx
import numpy as np
import pytest

from gluondist import kvstore, parallel
from gluondist.pipeline import balanced_bounds


def deep(units=(16, 12, 8, 3)):
    net = mx.gluon.nn.HybridSequential()
    for u in units[:-1]:
        net.add(mx.gluon.nn.Dense(u, activation="tanh"))
    net.add(mx.gluon.nn.Dense(units[-1]))
    return net


def batch(n=12, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, 5).astype(np.float32), rs.randint(0, 3, n).astype(np.float32)


def twins(X):
    """Two nets with the same initial weights (seeded), on cpu(0)."""
    mx.random.seed(5)
    a, b = deep(), deep()
    for net in (a, b):
        net.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
        net(mx.nd.array(X))
    for pa, pb in zip(a.collect_params().values(), b.collect_params().values()):
        pb.set_data(pa.data())
    return a, b


def values(net):
    return [p.list_data()[0].asnumpy() for p in net.collect_params().values()]


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("micro", [1, 2, 4])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_micro_batches_on_stages_compute_the_whole_batch_on_one_context(stages, micro, optimizer):
    X, y = batch(n=11)  # 11: micro-batches of unequal sizes
    ref, net = twins(X)
    opt = {"learning_rate": 0.05, **({"momentum": 0.9} if optimizer == "sgd" else {})}
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    pipe = parallel.Pipeline(net, [mx.cpu(i) for i in range(stages)])
    trainer = kvstore.make_trainer(pipe, optimizer, opt, kvstore=None)  # every stage's
    assert isinstance(trainer, mx.gluon.Trainer) and trainer.exchange.updates.stages
    one = mx.gluon.Trainer(ref.collect_params(), optimizer, opt, kvstore=None)
    for _ in range(3):
        outputs, _ = pipe.forward_backward(loss, mx.nd.array(X), mx.nd.array(y), micro)
        trainer.step(len(X))
        with mx.autograd.record():
            out = ref(mx.nd.array(X))
            loss(out, mx.nd.array(y)).backward()
        one.step(len(X))
    assert len(outputs) == micro and outputs[-1].context == mx.cpu(stages - 1)
    for a, b in zip(values(ref), values(net)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)  # as fit's tests


def test_every_parameter_lives_on_exactly_one_context_of_its_stage():
    X, _ = batch()
    net = deep((16, 12, 8, 6, 3))
    pipe = parallel.Pipeline(net, [mx.cpu(0), mx.cpu(1), mx.cpu(2)], sample=X)
    assert len(set(map(str, pipe.contexts))) == 3
    for blocks, ctx in zip(pipe.stages, pipe.contexts):
        for block in blocks:
            for p in block.collect_params().values():
                assert p.list_ctx() == [ctx]
    held = pipe.param_bytes()
    total = sum(p.data().size * 4 for p in net.collect_params().values())
    assert sum(held.values()) == total and all(held.values())
    assert max(held.values()) < total  # no context holds the whole net
    assert pipe(mx.nd.array(X)).context == mx.cpu(2)


def test_deferred_shapes_are_learned_from_a_sample_then_balanced():
    X, _ = batch()
    net = deep()  # no in_units: shapes unknown until a forward
    pipe = parallel.Pipeline(net, [mx.cpu(0), mx.cpu(1)], sample=X)
    assert pipe.bounds == [0, 2, 4]  # 96 + 204 | 104 + 27 parameters
    assert pipe(mx.nd.array(X)).shape == (12, 3)


def test_stages_at_the_boundaries_given():
    net = deep()
    pipe = parallel.Pipeline(net, [mx.cpu(0), mx.cpu(1)], stages=[3])
    assert pipe.bounds == [0, 3, 4]
    pipe(mx.nd.array(batch()[0]))  # deferred shapes, each stage on its own context
    assert [p.list_ctx() for p in net[3].collect_params().values()] == [[mx.cpu(1)]] * 2
    assert [p.list_ctx() for p in net[0].collect_params().values()] == [[mx.cpu(0)]] * 2


@pytest.mark.parametrize("sizes, stages, expected", [
    ([1, 1, 1, 1], 2, [0, 2, 4]),
    ([10, 1, 1, 1], 2, [0, 1, 4]),
    ([1, 1, 1, 10], 3, [0, 1, 3, 4]),  # a tie: the earliest cuts
    ([5, 5, 5], 3, [0, 1, 2, 3]),
    ([3, 3], 1, [0, 2]),
])
def test_balanced_bounds(sizes, stages, expected):
    assert balanced_bounds(sizes, stages) == expected


class Residual(mx.gluon.HybridBlock):
    def __init__(self):
        super().__init__()
        self.a = mx.gluon.nn.Dense(4)

    def hybrid_forward(self, F, x):
        return x + self.a(x)


def with_batch_norm():
    net = deep()
    net.add(mx.gluon.nn.BatchNorm())
    return net


@pytest.mark.parametrize("make, ctxs, kw, message", [
    (with_batch_norm, 2, {}, "holds BatchNorm"),
    (Residual, 2, {}, "splits a gluon.nn.Sequential or HybridSequential"),
    (deep, 5, {}, "5 stages (one per context) but the net has only 4 children"),
    (deep, 2, {"stages": [4]}, "stages=[4]: give 1 increasing child indices between 1 and 3"),
    (deep, 3, {"stages": [2, 1]}, "give 2 increasing child indices"),
    (deep, [mx.cpu(0), mx.cpu(0)], {}, "repeat; give each stage a device of its own"),
    (deep, 2, {}, "pass sample= (an input batch), stages=[...]"),
])
def test_refusals_in_one_line(make, ctxs, kw, message):
    ctx = [mx.cpu(i) for i in range(ctxs)] if isinstance(ctxs, int) else ctxs
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")) as err:
        parallel.Pipeline(make(), ctx, **kw)
    assert "\n" not in str(err.value)


def test_more_micro_batches_than_samples_is_refused():
    X, y = batch(n=3)
    pipe = parallel.Pipeline(deep(), [mx.cpu(0), mx.cpu(1)], sample=X)
    with pytest.raises(ValueError, match="micro_batches=4 exceeds the batch of 3 sample"):
        pipe.forward_backward(mx.gluon.loss.L2Loss(), mx.nd.array(X), mx.nd.array(y), 4)


def test_known_shapes_are_initialised_on_each_stages_device_directly():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, in_units=5), mx.gluon.nn.Dense(3, in_units=8))
    net.initialize = None  # never the whole net on the CPU first (calling it would fail)
    pipe = parallel.Pipeline(net, [mx.cpu(0), mx.cpu(1)])  # no sample needed
    assert pipe.bounds == [0, 1, 2]
    assert [p.list_ctx() for p in net[1].collect_params().values()] == [[mx.cpu(1)]] * 2
