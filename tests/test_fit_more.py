"""What Keras users reach for after fit: DataLoader workers kept, evaluate and predict, best
weights, gradient accumulation, several inputs and outputs, sample and class weights, speed."""
import logging
import os

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import EarlyStopping, SaveBest
from gluondist.callbacks import Callback
from conftest import curves, fit_mlp, mlp, param_sum, rel_diff

_fit = fit_mlp


class PidDataset(mx.gluon.data.Dataset):
    """Digits that leave a file named after the process that loaded each sample."""

    def __init__(self, X, y, where):
        self.X, self.y, self.where = X, y, where

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        open(os.path.join(self.where, str(os.getpid())), "w").close()
        return self.X[i], self.y[i]


def test_the_dataloaders_worker_processes_load_the_data(small, tmp_path):
    (X, y), _ = small
    loader = mx.gluon.data.DataLoader(PidDataset(X, y, str(tmp_path)), batch_size=40,
                                      num_workers=2, shuffle=True)
    by_workers, h = _fit(loader, epochs=2, batch_size=40)
    pids = {int(p) for p in os.listdir(tmp_path)}
    assert len(pids - {os.getpid()}) == 2  # the two worker processes
    in_process, _ = _fit(mx.gluon.data.ArrayDataset(X, y), epochs=2, batch_size=40)
    assert rel_diff(param_sum(by_workers), param_sum(in_process)) <= 1e-5  # same batches


class Sizes(Callback):
    def __init__(self):
        self.sizes = []

    def on_batch_end(self, run, batch, logs):
        self.sizes.append(logs["size"])


def test_last_batch_discard_drops_the_last_partial_batch(small):
    (X, y), _ = small
    sizes = Sizes()
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=30,
                                      last_batch="discard")
    _fit(loader, epochs=1, callbacks=[sizes])
    assert sizes.sizes == [30] * 13  # 400 = 13 x 30 + 10: the 10 are dropped
    kept = Sizes()
    _fit(mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=30), epochs=1,
         callbacks=[kept])
    assert kept.sizes == [30] * 13 + [10]
    with pytest.raises(ValueError, match="last_batch='rollover'.*use 'keep' or 'discard'"):
        _fit(mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=30,
                                      last_batch="rollover"))


def test_an_error_in_a_loader_worker_reaches_the_caller(small):
    class Broken(mx.gluon.data.Dataset):
        def __len__(self):
            return 400

        def __getitem__(self, i):
            if i == 333:
                raise IndexError("sample 333 is corrupt")
            return small[0][0][i], small[0][1][i]

    loader = mx.gluon.data.DataLoader(Broken(), batch_size=40, num_workers=2)
    with pytest.raises(Exception, match="sample 333 is corrupt"):
        _fit(loader, epochs=1)


@pytest.mark.parametrize("ctx", [1, 2])
def test_evaluate_right_after_fit_gives_its_last_validation_figures(small, ctx):
    metrics = lambda: ["acc", mx.metric.TopKAccuracy(3)]
    net, h = _fit(small[0], val_data=small[1], ctx=ctx, metrics=metrics())
    figures = gluondist.evaluate(net, small[1], metrics=metrics(), ctx=ctx)
    assert set(figures) == {"loss", "accuracy", "top_k_accuracy_3"}
    for key, value in figures.items():
        assert value == pytest.approx(h.history[f"val_{key}"][-1], rel=1e-6), key


def test_predict_returns_outputs_in_sample_order(small):
    net, h = _fit(small[0], val_data=small[1])
    out = gluondist.predict(net, small[1][0], batch_size=64, ctx=2)
    assert isinstance(out, np.ndarray) and out.shape == (200, 10)
    accuracy = (out.argmax(axis=1) == small[1][1]).mean()
    assert accuracy == pytest.approx(h.history["val_accuracy"][-1], abs=1e-9)
    assert np.allclose(out, net(mx.nd.array(small[1][0])).asnumpy(), atol=1e-5)
    with pytest.raises(ValueError, match="no parameters yet"):
        gluondist.predict(mlp(), small[1][0])
    fresh = mlp()
    fresh.initialize()  # deferred: the shapes come with the first batch, as in MXNet
    out = gluondist.predict(fresh, small[1][0], ctx=2)
    assert out.shape == (200, 10)
    assert np.allclose(out, fresh(mx.nd.array(small[1][0])).asnumpy(), atol=1e-5)


def test_restore_best_weights_leaves_the_best_epoch(small):
    stop = EarlyStopping("val_loss", patience=20, restore_best_weights=True)
    # lr 1.5 overshoots: val_loss is not at its best in the last epoch
    net, h = _fit(small[0], epochs=6, val_data=small[1], callbacks=[stop],
                  optimizer_params={"learning_rate": 1.5, "momentum": 0.9})
    best = min(h.history["val_loss"])
    assert h.history["val_loss"][-1] != best
    assert gluondist.evaluate(net, small[1])["loss"] == pytest.approx(best, rel=1e-6)


def test_save_best_writes_the_best_weights_for_plain_mxnet(small, tmp_path):
    path = tmp_path / "best.params"
    net, h = _fit(small[0], epochs=6, val_data=small[1], callbacks=[SaveBest(path)],
                  optimizer_params={"learning_rate": 1.5, "momentum": 0.9})
    loaded = mlp()
    loaded.load_parameters(str(path))
    best = min(h.history["val_loss"])
    assert gluondist.evaluate(loaded, small[1])["loss"] == pytest.approx(best, rel=1e-6)
    assert [p.name for p in tmp_path.iterdir()] == ["best.params"]  # no temporary file left


def test_best_weights_survive_a_resume(small, tmp_path):
    kw = dict(val_data=small[1], checkpoint_dir=tmp_path / "ckpt",
              optimizer_params={"learning_rate": 1.5, "momentum": 0.9})
    full_stop = EarlyStopping("val_loss", patience=20, restore_best_weights=True)
    full, hf = _fit(small[0], epochs=6, callbacks=[full_stop],
                    val_data=small[1], optimizer_params=kw["optimizer_params"])
    _fit(small[0], epochs=3, callbacks=[EarlyStopping("val_loss", patience=20,
                                                      restore_best_weights=True)], **kw)
    resumed, hr = _fit(small[0], epochs=6, callbacks=[
        EarlyStopping("val_loss", patience=20, restore_best_weights=True)], **kw)
    assert rel_diff(param_sum(full), param_sum(resumed)) <= 1e-4


@pytest.mark.parametrize("ctx", [1, 2])
def test_accumulating_4_batches_of_16_equals_batches_of_64(small, ctx):
    schedule = lambda: mx.lr_scheduler.FactorScheduler(step=3, factor=0.7)
    params = lambda: {"learning_rate": 0.1, "momentum": 0.9, "clip_global_norm": 2.0,
                      "lr_scheduler": schedule()}
    big, hb = _fit(small[0], epochs=3, batch_size=64, ctx=ctx, optimizer_params=params())
    acc, ha = _fit(small[0], epochs=3, batch_size=16, ctx=ctx, accumulate=4,
                   optimizer_params=params())
    assert rel_diff(param_sum(big), param_sum(acc)) <= 1e-4
    assert np.allclose(ha.history["loss"], hb.history["loss"], rtol=1e-4)


def _two_by_two(n=300, seed=0):
    rs = np.random.RandomState(seed)
    X1, X2 = rs.rand(n, 6).astype(np.float32), rs.rand(n, 4).astype(np.float32)
    y1 = (X1[:, 0] + X2[:, 0] > 1).astype(np.float32)  # a class
    y2 = (X1 @ rs.rand(6) + X2 @ rs.rand(4)).astype(np.float32)  # a value
    return (X1, X2), (y1, y2)


class TwoByTwo(mx.gluon.HybridBlock):
    def __init__(self):
        super().__init__()
        self.a, self.b = mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(16)
        self.cls, self.reg = mx.gluon.nn.Dense(2), mx.gluon.nn.Dense(1)

    def hybrid_forward(self, F, x1, x2):
        h = F.relu(self.a(x1) + self.b(x2))
        return self.cls(h), self.reg(h)


def test_a_two_input_two_output_net_trains_with_per_output_figures():
    X, y = _two_by_two()
    net = TwoByTwo()
    net.hybridize()
    losses = [mx.gluon.loss.SoftmaxCrossEntropyLoss(), mx.gluon.loss.L2Loss()]
    h = gluondist.fit(net, (X, y), val_data=(X, y), loss=losses, loss_weights=[1.0, 0.5],
                      metrics={0: "accuracy", 1: ["mae"]}, epochs=8, batch_size=32, seed=1,
                      optimizer="adam", optimizer_params={"learning_rate": 0.01})
    assert set(curves(h.history)) == {f"{p}{k}" for p in ("", "val_") for k in (
        "loss", "out0_loss", "out1_loss", "out0_accuracy", "out1_mae")}
    for p in ("", "val_"):  # the total is the weighted sum
        assert np.allclose(h.history[f"{p}loss"], np.array(h.history[f"{p}out0_loss"])
                           + 0.5 * np.array(h.history[f"{p}out1_loss"]), rtol=1e-5)
    assert h.history["out0_accuracy"][-1] > 0.8
    assert h.history["out1_loss"][-1] < h.history["out1_loss"][0]
    cls, reg = gluondist.predict(net, X)
    assert cls.shape == (300, 2) and reg.shape == (300, 1)
    figures = gluondist.evaluate(net, (X, y), loss=losses, loss_weights=[1.0, 0.5],
                                 metrics={0: "accuracy", 1: ["mae"]})
    assert figures["out1_mae"] == pytest.approx(h.history["val_out1_mae"][-1], rel=1e-6)


def test_outputs_and_losses_that_do_not_match_fail_before_training():
    X, y = _two_by_two()
    with pytest.raises(ValueError, match="2 output\\(s\\) but loss= gives 3"):
        gluondist.fit(TwoByTwo(), (X, y), loss=[mx.gluon.loss.L2Loss()] * 3)
    with pytest.raises(ValueError, match="returns 2 output\\(s\\) and train_data has 1 label"):
        gluondist.fit(TwoByTwo(), (X, y[0]))


def test_zero_sample_weights_exclude_those_samples_exactly(small):
    (X, y), _ = small
    weight = np.where(np.arange(len(X)) % 3 == 0, 0.0, 1.0).astype(np.float32)
    junk_a, junk_b = y.copy(), y.copy()
    junk_a[weight == 0], junk_b[weight == 0] = 0, 9  # whatever these labels are...
    a, ha = _fit((X, junk_a, weight), val_data=(X, junk_a, weight))
    b, hb = _fit((X, junk_b, weight), val_data=(X, junk_b, weight))
    assert param_sum(a) == param_sum(b)  # ...they change nothing
    keep = weight > 0
    figures = gluondist.evaluate(a, (X[keep], y[keep]))
    assert ha.history["val_loss"][-1] == pytest.approx(figures["loss"], rel=1e-6)
    assert ha.history["val_accuracy"][-1] == pytest.approx(figures["accuracy"], rel=1e-6)


def test_class_weight_is_a_weight_per_label(small):
    (X, y), _ = small
    by_class, hc = _fit((X, y), class_weight={k: 2.0 if k == 3 else 1.0 for k in range(10)})
    by_sample, hs = _fit((X, y, np.where(y == 3, 2.0, 1.0)))
    assert param_sum(by_class) == param_sum(by_sample)
    with pytest.raises(ValueError, match=r"class_weight covers classes 0..8 but train_data has "
                                         r"the label 9"):
        _fit((X, y), class_weight={k: 1.0 for k in range(9)})


def test_speed_is_in_the_history_and_the_log_line(small, caplog):
    caplog.set_level(logging.INFO, logger="gluondist")
    _, h = _fit(small[0], epochs=2, progress=False)
    assert len(h.history["epoch_seconds"]) == 2
    for seconds, speed in zip(h.history["epoch_seconds"], h.history["samples_per_s"]):
        assert speed == pytest.approx(400 / seconds, rel=1e-9)
    assert "samples/s" in caplog.text and "epoch 2/2" in caplog.text



# Found by trying to break fit as a new user would (each was a defect).

def _three(n=90):
    rs = np.random.RandomState(0)
    return rs.rand(n, 6).astype(np.float32), rs.randint(0, 3, n).astype(np.float32)


def _net3():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, activation="relu"), mx.gluon.nn.Dense(3))
    return net


@pytest.mark.parametrize("weights,message", [
    ({0: 1.0, 1: 5.0}, "class_weight (has 2 classes but the net outputs 3|covers classes 0..1 "
                       "but train_data has the label 2)"),
    ({0: 1.0, 2: 3.0}, "every class index 0..K-1"),
    ([1.0, 2.0, 3.0], "must be a dict"),
    ({0: 1.0, 1: "a", 2: 1.0}, "non-negative numbers"),
    ({0: 1.0, 1: -1.0, 2: 1.0}, "non-negative numbers"),
    ({0: 1.0, 1: float("nan"), 2: 1.0}, "non-negative numbers"),
])
@pytest.mark.parametrize("kind", ["arrays", "dataset"])
def test_class_weight_is_checked_alike_for_every_kind_of_data(weights, message, kind):
    X, y = _three()
    data = (X, y) if kind == "arrays" else mx.gluon.data.SimpleDataset(list(zip(X, y)))
    with pytest.raises(ValueError, match=message):
        gluondist.fit(_net3(), data, class_weight=weights)


def test_class_weight_needs_class_labels_and_leaves_validation_alone():
    X, y = _three()
    onehot = np.eye(3, dtype=np.float32)[y.astype(int)]
    with pytest.raises(ValueError, match="class_weight needs class-index labels"):
        gluondist.fit(_net3(), (X, onehot), class_weight={0: 1.0, 1: 1.0, 2: 10.0},
                      loss=mx.gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False))
    net = _net3()
    h = gluondist.fit(net, (X, y), val_data=(X, y), class_weight={0: 1.0, 1: 3.0, 2: 0.5},
                      epochs=2, batch_size=16, seed=0)
    figures = gluondist.evaluate(net, (X, y))
    assert figures["loss"] == pytest.approx(h.history["val_loss"][-1], rel=1e-6)


def test_negative_or_all_zero_sample_weights_are_refused():
    X, y = _three()
    with pytest.raises(ValueError, match="negative sample weights"):
        gluondist.fit(_net3(), mx.gluon.data.SimpleDataset(
            list(zip(X, y, -np.ones(len(X), dtype=np.float32)))))
    with pytest.raises(ValueError, match="every sample weighs 0"):
        gluondist.fit(_net3(), (X, y, np.zeros(len(X))))
    with pytest.raises(ValueError, match="every sample of its first batch weighs 0"):
        gluondist.fit(_net3(), mx.gluon.data.ArrayDataset(X, y, np.zeros(len(X), "f")))


def test_a_net_returning_a_one_tuple_trains():
    class OneTuple(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.dense = mx.gluon.nn.Dense(3)

        def hybrid_forward(self, F, x):
            return (self.dense(x),)

    X, y = _three()
    net = OneTuple()
    h = gluondist.fit(net, (X, y), val_data=(X, y), epochs=2, batch_size=16, seed=0)
    assert gluondist.evaluate(net, (X, y))["accuracy"] == \
        pytest.approx(h.history["val_accuracy"][-1], rel=1e-6)


def test_metrics_auto_is_accuracy_for_classifiers_only():
    X, y = _two_by_two()
    h = gluondist.fit(TwoByTwo(), (X, y), loss=[mx.gluon.loss.SoftmaxCrossEntropyLoss(),
                                                mx.gluon.loss.L2Loss()], epochs=1)
    assert set(curves(h.history)) == {"loss", "out0_loss", "out1_loss", "out0_accuracy"}
    h = gluondist.fit(mx.gluon.nn.Dense(1), (X[0], y[1]), loss=mx.gluon.loss.L2Loss(), epochs=1)
    assert set(curves(h.history)) == {"loss"}


def test_an_unusable_save_best_path_fails_before_training(small, tmp_path):
    for path in (tmp_path / "missing" / "best.params", tmp_path):
        with pytest.raises(ValueError, match="SaveBest cannot write"):
            _fit(small[0], val_data=small[1], callbacks=[SaveBest(path)], epochs=1)


def test_a_dataloaders_sampler_is_never_silently_dropped(small):
    (X, y), _ = small
    dataset = mx.gluon.data.ArrayDataset(X, y)
    subset = mx.gluon.data.DataLoader(dataset, batch_size=10,
                                      sampler=mx.gluon.data.SequentialSampler(50))
    with pytest.raises(ValueError, match="picks 50 of the dataset's 400 samples"):
        _fit(subset)
    custom = mx.gluon.data.DataLoader(dataset, batch_sampler=[[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="cannot follow a custom batch_sampler"):
        _fit(custom)


def test_a_validation_loader_keeps_last_batch_discard(small):
    (X, y), (Xv, yv) = small
    val = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(Xv[:70], yv[:70]), batch_size=32,
                                   last_batch="discard")
    net, h = _fit((X, y), val_data=val, batch_size=32)
    first_64 = gluondist.evaluate(net, (Xv[:64], yv[:64]))
    assert h.history["val_loss"][-1] == pytest.approx(first_64["loss"], rel=1e-6)


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


def test_the_time_split_adds_up_and_finds_a_slow_data_source(small, caplog):
    (X, y), _ = small
    caplog.set_level(logging.INFO, logger="gluondist")
    _, h = _fit(SlowDigits(X[:160], y[:160]), epochs=2, batch_size=16, progress=False,
                callbacks=[gluondist.EpochLogger(time_split=True)])
    for e in range(2):
        parts = [h.history[k][e] for k in ("data_seconds", "compute_seconds", "sync_seconds")]
        assert sum(parts) == pytest.approx(h.history["epoch_seconds"][e], rel=0.01)
        assert parts[0] >= 0.8 * 160 * 0.005  # 160 samples of 5 ms: most of the epoch
        assert parts[0] > parts[1] and parts[2] < parts[1]  # one device: nothing to sync
    assert "(data " in caplog.text and "compute " in caplog.text and "sync " in caplog.text
