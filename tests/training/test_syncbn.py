"""gluondist.sync_batchnorm in one process: a converted layer computes what MXNet's BatchNorm
computes (outputs, gradients, running statistics), keeps the parameters and their names, and
what it cannot do is refused in one line. The job-wide sums: tests/e2e/test_syncbn.py."""
import mxnet as mx
import numpy as np
import pytest

import gluondist
from conftest import assert_same_params


def conv_bn(x=None, **bn):
    """A float64 conv net with BatchNorm, initialised by a pass over ``x`` (if given)."""
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(6, 3, use_bias=False), mx.gluon.nn.BatchNorm(**bn),
            mx.gluon.nn.Activation("relu"), mx.gluon.nn.Dense(3))
    net.cast("float64")
    mx.random.seed(2)
    net.initialize(mx.init.Xavier())
    if x is not None:
        net(x)
    return net


def step(net, x, lr=0.1, steps=2):
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr})
    for _ in range(steps):
        with mx.autograd.record():
            loss = (net(x) ** 2).sum()
        loss.backward()
        trainer.step(x.shape[0])
    return net(x).asnumpy()  # predict mode: the running statistics


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("bn", [{}, {"scale": False, "center": False}, {"momentum": 0.7}])
def test_a_converted_layer_computes_what_batchnorm_does(hybridize, bn):
    x = mx.nd.array(np.random.RandomState(0).randn(5, 2, 7, 7) * 3 + 1, dtype="float64")
    plain, synced = conv_bn(x, **bn), conv_bn(x, **bn)
    assert gluondist.sync_batchnorm(synced) == 1
    assert type(synced[1]).__name__ == "SyncBatchNorm"
    for net in (plain, synced):
        if hybridize:
            net.hybridize()
    np.testing.assert_allclose(step(synced, x), step(plain, x), rtol=1e-10, atol=1e-12)
    assert_same_params(synced, plain, rtol=1e-10)


def test_parameters_and_their_names_are_kept():
    net = mx.gluon.model_zoo.vision.resnet18_v1(classes=4)
    net.initialize()
    net(mx.nd.zeros((1, 3, 32, 32)))
    before = net._collect_params_with_prefix()
    net.hybridize()
    assert gluondist.sync_batchnorm(net) == 20
    after = net._collect_params_with_prefix()  # by structural name: the same objects
    assert sorted(after) == sorted(before)
    assert all(after[name] is param for name, param in before.items())
    assert net(mx.nd.zeros((1, 3, 32, 32))).shape == (1, 4)
    assert gluondist.sync_batchnorm(net) == 0  # nothing left to convert


def test_what_it_cannot_do_is_refused_in_one_line():
    late = conv_bn()
    with pytest.raises(ValueError, match="has no shape yet; run one forward pass"):
        gluondist.sync_batchnorm(late)
    two = mx.gluon.nn.HybridSequential()
    two.add(mx.gluon.nn.Dense(4), mx.gluon.nn.BatchNorm())
    two.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    two(mx.nd.zeros((2, 3)))
    with pytest.raises(ValueError, match="lives on 2 devices; it runs one device per worker"):
        gluondist.sync_batchnorm(two)
    kept = mx.gluon.nn.HybridSequential()
    kept.add(mx.gluon.nn.Dense(4), mx.gluon.nn.BatchNorm(use_global_stats=True))
    kept.initialize()
    kept(mx.nd.zeros((2, 3)))
    assert gluondist.sync_batchnorm(kept) == 0  # it never uses batch statistics


def test_fit_refuses_it_with_a_pipeline():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(4), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(2))
    X, y = np.zeros((8, 3), np.float32), np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="sync_batchnorm normalise over the whole job's batch: "
                                         "pass parallel='data'"):
        gluondist.fit(net, (X, y), parallel="pipeline", ctx=2, sync_batchnorm=True)


def test_a_layer_kept_in_a_list_is_converted_there_too():
    class Listed(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.norms = [mx.gluon.nn.BatchNorm()]
            self.register_child(self.norms[0], "norm0")

        def hybrid_forward(self, F, x):
            return self.norms[0](x)

    net = Listed()
    net.initialize()
    net(mx.nd.ones((2, 3)))
    assert gluondist.sync_batchnorm(net) == 1
    assert type(net.norms[0]).__name__ == "SyncBatchNorm"


def test_a_last_batch_that_leaves_a_worker_no_sample_is_refused():
    from gluondist.syncbn import check_shares
    check_shares(10, 4, 2, "keep")  # a last batch of 2: one each
    check_shares(9, 4, 2, "discard")
    with pytest.raises(ValueError, match="leave a last batch of 1, which gives some of the 2 "
                                         "workers no sample; drop it"):
        check_shares(9, 4, 2, "keep")
