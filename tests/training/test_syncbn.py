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


def test_a_subclass_is_converted_unless_its_forward_is_its_own():
    class Same(mx.gluon.nn.BatchNorm):  # a BatchNorm by another name
        pass

    class Own(mx.gluon.nn.BatchNorm):
        def hybrid_forward(self, F, x, **params):
            return super().hybrid_forward(F, x, **params) * 2

    def net_of(norm, shaped=True):
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Dense(4), norm)
        net.initialize()
        if shaped:
            net(mx.nd.ones((2, 3)))
        return net
    same = net_of(Same())
    assert gluondist.sync_batchnorm(same) == 1 and type(same[1]).__name__ == "SyncBatchNorm"
    # refused before any shape is needed; no pass (BatchNormReLU's fails on this build, and
    # MXNet raises that error later, in whatever waits next)
    for norm in (Own(), mx.gluon.nn.BatchNormReLU()):
        with pytest.raises(ValueError, match=f"is a {type(norm).__name__}, a BatchNorm with a "
                                             "forward of its own, which sync_batchnorm cannot "
                                             "keep: build it from nn.BatchNorm"):
            gluondist.sync_batchnorm(net_of(norm, shaped=False))


def test_plain_batchnorm_puts_the_layers_back_and_the_export_loads_elsewhere(tmp_path):
    import subprocess
    import sys
    x = mx.nd.array(np.random.RandomState(0).randn(5, 2, 7, 7), dtype="float64")
    net = conv_bn(x)
    before = net._collect_params_with_prefix()
    assert gluondist.sync_batchnorm(net) == 1
    net.hybridize()
    out = step(net, x)
    assert gluondist.plain_batchnorm(net) == 1 and type(net[1]) is mx.gluon.nn.BatchNorm
    assert all(net._collect_params_with_prefix()[k] is p for k, p in before.items())
    net.export(str(tmp_path / "net"))  # as it is: no call in between
    plain = net(x).asnumpy()  # MXNet's BatchNorm with the trained running statistics
    np.testing.assert_allclose(plain, out, rtol=1e-12)
    np.save(tmp_path / "x.npy", x.asnumpy())
    load = ("import mxnet as mx, numpy as np; net = mx.gluon.SymbolBlock.imports('net-symbol.json',"
            " ['data'], 'net-0000.params'); net.cast('float64'); "
            "np.save('y.npy', net(mx.nd.array(np.load('x.npy'), dtype='float64')).asnumpy())")
    subprocess.run([sys.executable, "-c", load], cwd=tmp_path, check=True, timeout=120)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), plain)
    assert gluondist.plain_batchnorm(net) == 0


def test_fit_puts_the_nets_own_batchnorm_back_when_it_returns(tmp_path):
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(4), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(2))
    rs = np.random.RandomState(0)
    X, y = rs.randn(16, 3).astype(np.float32), rs.randint(0, 2, 16).astype(np.float32)
    net.hybridize()
    gluondist.fit(net, (X, y), epochs=1, batch_size=8, progress=False, sync_batchnorm=True)
    assert type(net[1]) is mx.gluon.nn.BatchNorm
    net.export(str(tmp_path / "net"))  # the graph traced anew, with MXNet's BatchNorm
    assert "gluondist" not in (tmp_path / "net-symbol.json").read_text()
    before = net[1].running_mean.data().asnumpy()
    gluondist.fit(net, (X, y), epochs=1, batch_size=8, progress=False, sync_batchnorm=True)
    assert type(net[1]) is mx.gluon.nn.BatchNorm  # converted again, and back again
    assert not np.array_equal(net[1].running_mean.data().asnumpy(), before)
