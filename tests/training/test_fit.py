"""What fit computes: Keras-like history, devices, seeds, clipping, accumulation,
several inputs and outputs, the time split, BatchNorm copies, the settings it
refuses or leaves unchanged."""
import logging
import random

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import Callback, checkpoint, EarlyStopping

from conftest import (assert_same_history, assert_same_params, curves, fit_mlp, mlp, OPT,
                      params_of)
from fits import Interrupt, TwoByTwo, fit_on, three_classes, two_by_two


class SlowDigits(mx.gluon.data.Dataset):
    """Digits that take 5 ms each to load (read in the training thread)."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        import time
        time.sleep(0.005)
        return self.X[i], self.y[i]


gdata = mx.gluon.data


# (3) seed seeds numpy's and Python's global RNGs, and resume replays them
class Noisy(gdata.Dataset):
    """A transform that draws from numpy's and Python's global RNGs."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        noise = np.random.rand(*self.X[i].shape).astype(np.float32) * 0.5 * random.random()
        return self.X[i] + noise, self.y[i]


# (4) fit works on its own copy of the optimizer settings
def scheduled():
    return {"learning_rate": 0.1, "momentum": 0.9,
            "lr_scheduler": mx.lr_scheduler.FactorScheduler(step=5, factor=0.5)}


class Poison(Callback):
    """Sets the output layer's bias to NaN after ``batch`` of ``epoch``."""

    def __init__(self, epoch, batch):
        self.at = (epoch, batch)

    def on_batch_end(self, run, batch, logs):
        if (run.epoch, batch) == self.at:
            bias = run.net[-1].bias
            bias.set_data(bias.data() * np.nan)


def _bn_net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(32), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Activation("relu"),
            mx.gluon.nn.Dense(10))
    return net


def test_history_has_keras_keys_and_learns(small):
    train, val = small
    h = gluondist.fit(mlp(), train, val_data=val, epochs=3, batch_size=32, seed=0,
                      optimizer_params=OPT)
    assert set(curves(h.history)) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(v > 0 for v in h.history["samples_per_s"] + h.history["epoch_seconds"])
    assert all(len(v) == 3 for v in h.history.values())
    assert h.epoch == [0, 1, 2]
    assert h.history["loss"][-1] < h.history["loss"][0]
    assert h.history["val_accuracy"][-1] > 0.8


def test_accuracy_matches_a_pass_over_the_data(small):
    (X, y), _ = small
    net = mlp()
    h = gluondist.fit(net, (X, y), val_data=(X, y), epochs=1, batch_size=50, seed=1)
    predicted = net(mx.nd.array(X)).argmax(axis=1).asnumpy()
    assert h.history["val_accuracy"][0] == pytest.approx((predicted == y).mean(), abs=1e-6)


def test_plot_writes_a_png(small, tmp_path):
    train, val = small
    h = gluondist.fit(mlp(), train, val_data=val, epochs=2, seed=0)
    path = tmp_path / "curves.png"
    fig = h.plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [("epoch", "loss"),
                                                                       ("epoch", "accuracy")]


def test_empty_history_plot_is_a_clear_error(small, tmp_path):
    _, h = fit_mlp(small[0], epochs=0)
    with pytest.raises(ValueError, match="no epochs to plot"):
        h.plot(tmp_path / "x.png")


@pytest.mark.parametrize("extra", [
    {},
    {"optimizer_params": {"clip_global_norm": 0.5,
                          "lr_scheduler": None}},
])
def test_two_contexts_end_where_one_does(small, extra):
    extra = dict(extra)
    if "optimizer_params" in extra:
        extra["optimizer_params"]["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(5, 0.5)
    one, h1 = fit_on([mx.cpu(0)], small[0], **dict(extra))
    if "optimizer_params" in extra:
        extra["optimizer_params"]["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(5, 0.5)
    two, h2 = fit_on([mx.cpu(0), mx.cpu(1)], small[0], **extra)
    assert_same_params(two, one, 1e-4)
    assert_same_history(h2, h1)


def test_same_seed_same_result_different_seed_different(small):
    a, _ = fit_on(None, small[0], seed=1)
    b, _ = fit_on(None, small[0], seed=1)
    c, _ = fit_on(None, small[0], seed=2)
    assert_same_params(a, b)
    pa, pc = params_of(a), params_of(c)
    assert not any(np.array_equal(pa[k], pc[k]) for k in pa)  # each array drawn anew


def test_seed_makes_global_rng_transforms_reproducible_and_resume_exact(small, tmp_path):
    data = Noisy(*small[0])
    a, ha = fit_mlp(data, epochs=3, seed=0)
    np.random.seed(123)  # whatever the user's code did in between
    random.seed(123)
    b, hb = fit_mlp(data, epochs=3, seed=0)
    assert_same_params(a, b)
    assert curves(ha.history) == curves(hb.history)
    ckpt = tmp_path / "ckpt"
    fit_mlp(data, epochs=1, seed=0, checkpoint_dir=ckpt)
    np.random.rand(7)  # drawn between the two calls: the checkpoint's state is restored
    random.random()
    c, hc = fit_mlp(data, epochs=3, seed=0, checkpoint_dir=ckpt)
    assert_same_params(c, a)
    assert curves(hc.history) == curves(ha.history)


def test_clipping_bounds_each_step(small):
    (X, y), _ = small
    free, _ = fit_on(None, (X, y * 0 + 9), epochs=1, optimizer_params={"momentum": 0.0})
    clipped, _ = fit_on(None, (X, y * 0 + 9), epochs=1,
                      optimizer_params={"momentum": 0.0, "clip_global_norm": 1e-3})
    start = mlp()
    gluondist.fit(start, (X, y), epochs=0, seed=7)  # same init, no step
    first = params_of(start)
    moved = lambda n: np.sqrt(sum(np.sum((v - first[k]) ** 2) for k, v in params_of(n).items()))
    assert moved(clipped) < moved(free) / 10


def test_an_initialised_net_is_kept(small):
    net = mlp()
    net.initialize(mx.init.Constant(0.01))
    net(mx.nd.ones((1, 64)))
    before = params_of(net)
    gluondist.fit(net, small[0], epochs=0)
    assert_same_params(net, before)


@pytest.mark.parametrize("ctx", [1, 2])
def test_accumulating_4_batches_of_16_equals_batches_of_64(small, ctx):
    schedule = lambda: mx.lr_scheduler.FactorScheduler(step=3, factor=0.7)
    params = lambda: {"learning_rate": 0.1, "momentum": 0.9, "clip_global_norm": 2.0,
                      "lr_scheduler": schedule()}
    big, hb = fit_mlp(small[0], epochs=3, batch_size=64, ctx=ctx, optimizer_params=params())
    acc, ha = fit_mlp(small[0], epochs=3, batch_size=16, ctx=ctx, accumulate=4,
                      optimizer_params=params())
    assert_same_params(acc, big, 1e-4)
    assert_same_history(ha, hb)


def test_a_two_input_two_output_net_trains_with_per_output_figures():
    X, y = two_by_two()
    net = TwoByTwo()
    net.hybridize()
    losses = [mx.gluon.loss.SoftmaxCrossEntropyLoss(), mx.gluon.loss.L2Loss()]
    h = gluondist.fit(net, (X, y), val_data=(X, y), loss=losses, loss_weights=[1.0, 0.5],
                      metrics={0: "accuracy", 1: ["mae"]}, epochs=15, batch_size=32, seed=1,
                      optimizer="adam", optimizer_params={"learning_rate": 0.01})
    assert set(curves(h.history)) == {f"{p}{k}" for p in ("", "val_") for k in (
        "loss", "out0_loss", "out1_loss", "out0_accuracy", "out1_mae")}
    for p in ("", "val_"):  # the total is the weighted sum
        assert np.allclose(h.history[f"{p}loss"], np.array(h.history[f"{p}out0_loss"])
                           + 0.5 * np.array(h.history[f"{p}out1_loss"]), rtol=1e-5)
    assert h.history["out0_accuracy"][-1] > 0.8  # 0.90 to 0.94 over seeds 0..4: it learns
    assert h.history["out1_loss"][-1] < h.history["out1_loss"][0]
    cls, reg = gluondist.predict(net, X)
    assert cls.shape == (300, 2) and reg.shape == (300, 1)
    figures = gluondist.evaluate(net, (X, y), loss=losses, loss_weights=[1.0, 0.5],
                                 metrics={0: "accuracy", 1: ["mae"]})
    assert figures["out1_mae"] == pytest.approx(h.history["val_out1_mae"][-1], rel=1e-6)


def test_a_net_returning_a_one_tuple_trains():
    class OneTuple(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.dense = mx.gluon.nn.Dense(3)

        def hybrid_forward(self, F, x):
            return (self.dense(x),)

    X, y = three_classes()
    net = OneTuple()
    h = gluondist.fit(net, (X, y), val_data=(X, y), epochs=2, batch_size=16, seed=0)
    assert gluondist.evaluate(net, (X, y))["accuracy"] == \
        pytest.approx(h.history["val_accuracy"][-1], rel=1e-6)


def test_speed_is_in_the_history_and_the_log_line(small, caplog):
    caplog.set_level(logging.INFO, logger="gluondist")
    _, h = fit_mlp(small[0], epochs=2, callbacks=[gluondist.EpochLogger()])
    assert len(h.history["epoch_seconds"]) == 2
    for seconds, speed in zip(h.history["epoch_seconds"], h.history["samples_per_s"]):
        assert speed == pytest.approx(400 / seconds, rel=1e-9)
    assert "samples/s" in caplog.text and "epoch 2/2" in caplog.text


def test_the_time_split_adds_up_and_finds_a_slow_data_source(small, caplog):
    (X, y), _ = small
    caplog.set_level(logging.INFO, logger="gluondist")
    _, h = fit_mlp(SlowDigits(X[:160], y[:160]), epochs=2, batch_size=16, progress=False,
                   callbacks=[gluondist.EpochLogger(time_split=True)])
    for e in range(2):
        parts = [h.history[k][e] for k in ("data_seconds", "compute_seconds", "sync_seconds")]
        assert sum(parts) == pytest.approx(h.history["epoch_seconds"][e], rel=0.01)
        assert parts[0] >= 0.8 * 160 * 0.005  # 160 samples of 5 ms: most of the epoch
        assert parts[0] > parts[1] and parts[2] < parts[1]  # one device: nothing to sync
    assert "(data " in caplog.text and "compute " in caplog.text and "sync " in caplog.text


def test_batchnorm_copies_are_equal_on_every_device(small):
    net, _ = fit_mlp(small[0], net=_bn_net(), ctx=2, val_data=small[1])
    bn = net[1]
    for param in (bn.running_mean, bn.running_var):
        a, b = (d.asnumpy() for d in param.list_data())
        assert np.array_equal(a, b), param.name
    assert np.abs(bn.running_mean.data().asnumpy()).sum() > 0  # really trained


def test_several_fits_in_one_process(small):
    net = mlp()
    fit_mlp(small[0], epochs=1, net=net, ctx=2)
    _, h = fit_mlp(small[0], epochs=1, net=net, ctx=2)  # fine-tuning the same net
    _, h2 = fit_mlp(small[0], epochs=1, ctx=2)  # a new one
    assert h.history["loss"][0] < h2.history["loss"][0]


# (2) several devices without a kvstore
def test_kvstore_none_on_several_devices_is_refused(small):
    with pytest.raises(ValueError, match="kvstore=None on 2 devices .* kvstore='auto' or "
                                         "'device'"):
        fit_mlp(small[0], ctx=2, kvstore=None)
    fit_mlp(small[0], epochs=1, ctx=1, kvstore=None)  # one device: nothing to reduce


def test_a_shared_lr_scheduler_is_not_changed_by_fit(small, tmp_path):
    fresh, _ = fit_mlp(small[0], epochs=3, optimizer_params=scheduled())
    shared = scheduled()
    first, _ = fit_mlp(small[0], epochs=3, optimizer_params=shared)
    second, _ = fit_mlp(small[0], epochs=3, optimizer_params=shared)
    assert_same_params(first, fresh)
    assert_same_params(second, fresh)
    assert shared["lr_scheduler"].base_lr == 0.01  # MXNet's default, never advanced by fit
    # the notebook case: Ctrl-C, then the same call (same dict) resumes exactly
    net, ckpt = mlp(), tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        fit_mlp(small[0], epochs=3, net=net, optimizer_params=shared, checkpoint_dir=ckpt,
                callbacks=[Interrupt(1, 5)])
    fit_mlp(small[0], epochs=3, net=net, optimizer_params=shared, checkpoint_dir=ckpt)
    assert_same_params(net, fresh)


def test_an_optimizer_instance_is_not_changed_by_fit(small):
    opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9,
                           lr_scheduler=mx.lr_scheduler.FactorScheduler(step=5, factor=0.5))
    a, _ = fit_mlp(small[0], epochs=2, optimizer=opt, optimizer_params=None)
    b, _ = fit_mlp(small[0], epochs=2, optimizer=opt, optimizer_params=None)
    assert_same_params(b, a)
    assert opt.num_update == 0


def test_a_float64_net_is_refused_in_one_line(small):
    net = mlp()
    net.initialize()
    net(mx.nd.ones((1, 64)))  # shapes known: the net is ready to predict
    net.cast("float64")
    for call in (lambda: gluondist.fit(net, small[0]),
                 lambda: gluondist.predict(net, small[0][0]),
                 lambda: gluondist.evaluate(net, small[0])):
        with pytest.raises(ValueError, match=r"^parameter \w+ is float64 \(and 3 more\), "
                                             r".*cast the net with net.cast\('float32'\)$"):
            call()


@pytest.mark.parametrize("kwargs,message", [
    (dict(optimizer_params=0.1), "optimizer_params must be a dict"),
    (dict(optimizer=mx.optimizer.SGD(learning_rate=0.1)), "optimizer instance"),
    (dict(callbacks=[EarlyStopping("val_loss")], optimizer_params=None),
     "monitors 'val_loss'.*pass val_data"),
    (dict(metrics=mx.metric.create(["acc", "acc"])), "appear twice"),
    (dict(metrics=["f1x"]), "unknown metric 'f1x'"),
    (dict(callbacks=[print]), r"callbacks\[0\] is a builtin_function_or_method"),
])
def test_misconfigurations_fail_before_training(small, kwargs, message):
    net = mlp()
    with pytest.raises(ValueError, match=message) as info:
        fit_mlp(small[0], net=net, **kwargs)
    assert "\n" not in str(info.value)


def test_a_non_finite_loss_stops_training_and_keeps_the_checkpoint(small, tmp_path):
    with pytest.raises(FloatingPointError, match=r"loss is nan in epoch 2/3, batch 5/14"):
        fit_mlp(small[0], epochs=3, checkpoint_dir=tmp_path, callbacks=[Poison(1, 3)])
    ckpt = checkpoint.load_latest(tmp_path)
    assert ckpt.epoch == 0
    assert all(np.isfinite(v.asnumpy()).all() for v in ckpt.params.values())
    _, h = fit_mlp(small[0], epochs=2, terminate_on_nan=False, callbacks=[Poison(0, 3)])
    assert np.isnan(h.history["loss"][-1])  # the escape hatch trains on


def test_nan_in_a_dataset_stops_training_at_the_end_of_the_epoch(small, tmp_path):
    (X, y), _ = small
    X = X.copy()
    X[50, :] = np.nan
    with pytest.raises(FloatingPointError, match="became NaN or infinite in epoch 1/2"):
        fit_mlp(mx.gluon.data.SimpleDataset(list(zip(X, y))), checkpoint_dir=tmp_path)
    assert checkpoint.load_latest(tmp_path) is None  # no checkpoint of a broken model
