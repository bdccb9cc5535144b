"""fit() you can trust, in one process: checkpoints that cannot run code, fresh runs, exact
stops, non-finite values, exact metrics, checks for every kind of data, BatchNorm copies."""
import json
import os
import pickle
import shutil

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import checkpoint
from gluondist.callbacks import Callback
from gluondist.training.monitored import EarlyStopping
from conftest import curves, fit_mlp, mlp, param_sum, rel_diff

_fit = fit_mlp


class Planted:
    """Unpickling this runs code: it would create the file named in ``path``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_planted_pickle_is_never_executed(small, tmp_path):
    ckpt, proof = tmp_path / "ckpt", tmp_path / "executed"
    _fit(small[0], epochs=1, checkpoint_dir=ckpt)
    newest = ckpt / "ckpt-000000"
    for target in (ckpt / "epoch-0005.ckpt", newest / "trainer.states"):
        target.write_bytes(pickle.dumps(Planted(str(proof))))
    planted = ckpt / "ckpt-000009"  # a newer-looking checkpoint whose files are pickles
    planted.mkdir()
    (planted / "state.json").write_bytes(pickle.dumps(Planted(str(proof))))
    (planted / "net.params").write_bytes(pickle.dumps(Planted(str(proof))))
    net, h = _fit(small[0], epochs=3, checkpoint_dir=ckpt)
    assert not proof.exists()
    assert len(h.history["loss"]) == 3  # nothing usable: started over


def test_a_checkpoint_opens_with_plain_mxnet(small, tmp_path):
    net, h = _fit(small[0], epochs=2, checkpoint_dir=tmp_path)
    newest = tmp_path / "ckpt-000001"
    state = json.loads((newest / "state.json").read_text())
    assert state["epoch"] == 1 and state["history"] == h.history
    fresh = mlp()
    fresh.load_parameters(str(newest / "net.params"))
    assert param_sum(fresh) == pytest.approx(param_sum(net), rel=1e-6)
    momentum = mx.nd.load(str(newest / "trainer.states"))
    assert len(momentum) == len(net.collect_params().keys())  # one momentum per parameter


def test_unreadable_checkpoint_is_skipped_with_a_warning(small, tmp_path, caplog):
    _fit(small[0], epochs=2, checkpoint_dir=tmp_path)
    (tmp_path / "ckpt-000001" / "state.json").write_text("{not json")
    ckpt = checkpoint.load_latest(tmp_path)
    assert ckpt.epoch == 0
    assert "skipping checkpoint" in caplog.text and "ckpt-000001" in caplog.text


def test_resume_false_starts_a_fresh_run_that_later_resumes(small, tmp_path):
    _fit(small[0], epochs=5, checkpoint_dir=tmp_path)  # run A
    full, hf = _fit(small[0], epochs=4, seed=3)
    _, hb = _fit(small[0], epochs=3, seed=3, checkpoint_dir=tmp_path, resume=False)  # run B
    assert len(hb.history["loss"]) == 3
    resumed, hr = _fit(small[0], epochs=4, seed=3, checkpoint_dir=tmp_path)  # continues B
    assert len(hr.history["loss"]) == 4
    assert rel_diff(param_sum(full), param_sum(resumed)) <= 1e-4
    assert np.allclose(hr.history["loss"], hf.history["loss"], rtol=1e-4)


def test_resume_false_then_a_crash_before_any_checkpoint_never_resumes_the_old_run(small,
                                                                                tmp_path):
    _fit(small[0], epochs=3, checkpoint_dir=tmp_path)

    class Crash(Callback):
        def on_batch_end(self, run, batch, logs):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fit(small[0], epochs=3, checkpoint_dir=tmp_path, resume=False, callbacks=[Crash()])
    _, h = _fit(small[0], epochs=1, checkpoint_dir=tmp_path)
    assert len(h.history["loss"]) == 1  # a fresh start, not run A's epoch 3


def test_foreign_checkpoint_message_suggests_what_works(small, tmp_path):
    _fit(small[0], epochs=1, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="different model.*resume=False") as info:
        _fit(small[0], net=mlp(hidden=16), checkpoint_dir=tmp_path)
    _, h = _fit(small[0], epochs=1, net=mlp(hidden=16), checkpoint_dir=tmp_path, resume=False)
    assert len(h.history["loss"]) == 1 and "ckpt-000000" in str(info.value)


def test_a_checkpoint_of_the_earlier_format_is_refused_not_skipped(small, tmp_path):
    # format 2 derived the per-epoch seeds differently: resuming it would not replay its run
    _fit(small[0], epochs=1, checkpoint_dir=tmp_path)
    path = tmp_path / "ckpt-000000" / "state.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": 2}))
    with pytest.raises(ValueError, match=r"ckpt-000000 was written by an earlier gluondist "
                                         r"\(checkpoint format 2.*pass resume=False"):
        _fit(small[0], epochs=2, checkpoint_dir=tmp_path)
    _, h = _fit(small[0], epochs=1, checkpoint_dir=tmp_path, resume=False)
    assert len(h.history["loss"]) == 1


class StopAt(Callback):
    def __init__(self, epoch, batch):
        self.at = (epoch, batch)

    def on_batch_end(self, run, batch, logs):
        if (run.epoch, batch) == self.at:
            run.stop_training = True


def test_a_stop_mid_epoch_then_resume_equals_an_uninterrupted_run(small, tmp_path):
    full, hf = _fit(small[0], epochs=4)
    _, hs = _fit(small[0], epochs=4, checkpoint_dir=tmp_path, callbacks=[StopAt(1, 3)])
    assert len(hs.history["loss"]) == 2  # epoch 2 (index 1) was finished, then it stopped
    resumed, hr = _fit(small[0], epochs=4, checkpoint_dir=tmp_path)
    assert rel_diff(param_sum(full), param_sum(resumed)) <= 1e-4
    assert np.allclose(hr.history["loss"], hf.history["loss"], rtol=1e-4)


def test_early_stopping_state_survives_a_resume(small, tmp_path):
    class Feed(Callback):
        def on_epoch_end(self, run, epoch, logs):
            logs["val_loss"] = [3, 2, 2.5, 2.6, 2.7, 2.8][epoch]

    stop = EarlyStopping(patience=2)
    _, h = _fit(small[0], epochs=3, val_data=small[1], checkpoint_dir=tmp_path,
                callbacks=[Feed(), stop])
    resumed = EarlyStopping(patience=2)
    _, h = _fit(small[0], epochs=6, val_data=small[1], checkpoint_dir=tmp_path,
                callbacks=[Feed(), resumed])
    # 2.5, then 2.6 after the resume: two epochs without improving on 2 (patience 2) -> stop;
    # without its state it would start over at 2.6 and run all six epochs
    assert len(h.history["loss"]) == 4 and resumed.stopped_epoch == 3


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_refused_naming_the_row(small, bad):
    (X, y), _ = small
    X = X.copy()
    X[17, 5] = bad
    with pytest.raises(ValueError, match=r"train_data\[0\] \(X\) holds NaN or infinity "
                                         r"\(first in row 17\)"):
        _fit((X, y))
    dataset = mx.gluon.data.ArrayDataset(X, y)
    with pytest.raises(ValueError, match="row 17"):
        _fit(dataset)
    with pytest.raises(ValueError, match=r"val_data\[1\] \(y\).*row 3"):
        _fit(small[0], val_data=(small[1][0][:20], np.where(np.arange(20) == 3, bad, 1.0)))


class Poison(Callback):
    """Sets the output layer's bias to NaN after ``batch`` of ``epoch``."""

    def __init__(self, epoch, batch):
        self.at = (epoch, batch)

    def on_batch_end(self, run, batch, logs):
        if (run.epoch, batch) == self.at:
            bias = run.net[-1].bias
            bias.set_data(bias.data() * np.nan)


def test_a_non_finite_loss_stops_training_and_keeps_the_checkpoint(small, tmp_path):
    with pytest.raises(FloatingPointError, match=r"loss is nan in epoch 2/3, batch 5/14"):
        _fit(small[0], epochs=3, checkpoint_dir=tmp_path, callbacks=[Poison(1, 3)])
    ckpt = checkpoint.load_latest(tmp_path)
    assert ckpt.epoch == 0
    assert all(np.isfinite(v.asnumpy()).all() for v in ckpt.params.values())
    _, h = _fit(small[0], epochs=2, terminate_on_nan=False, callbacks=[Poison(0, 3)])
    assert np.isnan(h.history["loss"][-1])  # the escape hatch trains on


def _regression(n=331):
    rs = np.random.RandomState(0)
    X = rs.rand(600 + n, 8).astype(np.float32)
    y = (X @ rs.rand(8) + 0.1 * rs.randn(600 + n)).astype(np.float32)
    return (X[:600], y[:600]), (X[600:], y[600:])


def _regressor():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(1))
    return net


@pytest.mark.parametrize("ctx", [1, 2])
def test_regression_metrics_are_exact_means_over_samples(ctx):
    train, (Xv, yv) = _regression()
    net = _regressor()
    h = gluondist.fit(net, train, val_data=(Xv, yv), loss=mx.gluon.loss.L2Loss(), epochs=2,
                      batch_size=32, ctx=ctx, seed=1, metrics=["mse", "mae", "rmse"],
                      optimizer_params={"learning_rate": 0.05})
    pred = net(mx.nd.array(Xv)).asnumpy().ravel().astype(np.float64)
    err = pred - yv
    assert h.history["val_mse"][-1] == pytest.approx(np.mean(err ** 2), rel=1e-6)
    assert h.history["val_mae"][-1] == pytest.approx(np.mean(np.abs(err)), rel=1e-6)
    assert h.history["val_rmse"][-1] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-6)
    assert h.history["val_loss"][-1] == pytest.approx(np.mean(err ** 2) / 2, rel=1e-5)


def test_metrics_agree_on_one_and_two_devices(small):
    def probabilities():  # "ce" reads outputs as probabilities, as MXNet's does
        net = mlp()
        net.add(mx.gluon.nn.HybridLambda(lambda F, x: F.softmax(x)))
        return net

    kw = dict(metrics=["acc", "ce", mx.metric.TopKAccuracy(3)], val_data=small[1])
    _, one = _fit(small[0], ctx=1, net=probabilities(), **kw)
    _, two = _fit(small[0], ctx=2, net=probabilities(), **kw)
    assert np.isfinite(one.history["val_cross-entropy"]).all()
    assert set(curves(one.history)) == {f"{p}{k}" for p in ("", "val_") for k in
                                ("loss", "accuracy", "cross-entropy", "top_k_accuracy_3")}
    for key in curves(one.history):
        assert np.allclose(one.history[key], two.history[key], rtol=1e-6, atol=1e-7), key


def test_composite_and_custom_metrics(small):
    class MeanPred(mx.metric.EvalMetric):
        def __init__(self):
            super().__init__("mean_pred")

        def update(self, labels, preds):
            for p in preds:
                self.sum_metric += float(p.mean().asscalar()) * p.shape[0]
                self.num_inst += p.shape[0]

    net, h = _fit(small[0], epochs=1, val_data=small[1],
                  metrics=[mx.metric.create(["acc", "ce"]), MeanPred()])
    assert {"val_accuracy", "val_cross-entropy", "val_mean_pred"} <= set(h.history)
    expected = net(mx.nd.array(small[1][0])).mean().asscalar()
    assert h.history["val_mean_pred"][0] == pytest.approx(expected, rel=1e-5)


def _three_classes():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
    return net


def _labels_dataset(X, y, wrap):
    ds = mx.gluon.data.SimpleDataset(list(zip(X, y)))
    return ds.transform_first(lambda x: x * 1.0) if wrap == "transform_first" else ds


@pytest.mark.parametrize("wrap", ["transform_first", "simple"])
def test_label_checks_hold_for_every_dataset(small, wrap):
    (X, y), _ = small
    y = y % 3
    y[:5] = 7  # in the first batch
    with pytest.raises(ValueError, match=r"labels from 0 to 7 \(in its first batch\).* 3 classes"):
        _fit(_labels_dataset(X, y, wrap), net=_three_classes())
    loader = mx.gluon.data.DataLoader(_labels_dataset(X, y, wrap), batch_size=20)
    with pytest.raises(ValueError, match="labels from 0 to 7"):
        _fit(loader, net=_three_classes())


def test_labels_of_the_wrong_shape_fail_before_training(small):
    (X, y), _ = small
    with pytest.raises(ValueError, match=r"labels of shape \(30, 2, 2\).*one class index"):
        _fit((X, np.zeros((len(X), 2, 2))))


def test_integer_inputs_are_cast_to_float32(small):
    (X, y), _ = small
    ints = (X * 16).astype(np.int64)
    a, ha = _fit((ints, y.astype(np.int32)))
    b, hb = _fit(((X * 16).astype(np.float32), y))
    assert param_sum(a) == param_sum(b)
    ds = mx.gluon.data.ArrayDataset(mx.nd.array(ints, dtype="int32"), mx.nd.array(y))
    c, _ = _fit(ds)
    assert param_sum(c) == pytest.approx(param_sum(b), rel=1e-6)


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
        _fit(small[0], net=net, **kwargs)
    assert "\n" not in str(info.value)


def test_a_metric_that_cannot_update_fails_before_training_with_its_cause(small):
    class Broken(mx.metric.EvalMetric):
        def __init__(self):
            super().__init__("broken")

        def update(self, labels, preds):
            raise KeyError("no such column")

    with pytest.raises(ValueError, match="metric 'broken' cannot be computed on a batch of "
                                         "train_data: 'no such column'") as info:
        _fit(small[0], metrics=[Broken()])
    assert isinstance(info.value.__cause__, KeyError)


def test_empty_history_plot_is_a_clear_error(small, tmp_path):
    _, h = _fit(small[0], epochs=0)
    with pytest.raises(ValueError, match="no epochs to plot"):
        h.plot(tmp_path / "x.png")


def _bn_net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(32), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Activation("relu"),
            mx.gluon.nn.Dense(10))
    return net


def test_batchnorm_copies_are_equal_on_every_device(small):
    net, _ = _fit(small[0], net=_bn_net(), ctx=2, val_data=small[1])
    bn = net[1]
    for param in (bn.running_mean, bn.running_var):
        a, b = (d.asnumpy() for d in param.list_data())
        assert np.array_equal(a, b), param.name
    assert np.abs(bn.running_mean.data().asnumpy()).sum() > 0  # really trained


def test_several_fits_in_one_process(small):
    net = mlp()
    _fit(small[0], epochs=1, net=net, ctx=2)
    _, h = _fit(small[0], epochs=1, net=net, ctx=2)  # fine-tuning the same net
    _, h2 = _fit(small[0], epochs=1, ctx=2)  # a new one
    assert h.history["loss"][0] < h2.history["loss"][0]


# Found by trying to break fit as a new user would (each was a defect).

def test_float64_datasets_are_cast_like_arrays(small):
    (X, y), _ = small
    X64, y64 = X.astype(np.float64), y.astype(np.float64)
    ref, _ = _fit((X, y))
    for data in (mx.gluon.data.ArrayDataset(X64, y64),
                 mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X64, y64), batch_size=30),
                 mx.gluon.data.SimpleDataset(list(zip(X64, y64)))):
        net, _ = _fit(data)
        assert param_sum(net) == pytest.approx(param_sum(ref), rel=1e-6)


def test_sequence_accuracy_is_a_mean_per_sample():
    rs = np.random.RandomState(0)
    X, y = rs.rand(64, 5, 4).astype(np.float32), rs.randint(0, 3, (64, 5)).astype(np.float32)
    net = mx.gluon.nn.Dense(3, flatten=False)
    h = gluondist.fit(net, (X, y), val_data=(X, y), epochs=1, batch_size=16, seed=0)
    pred = net(mx.nd.array(X)).asnumpy().argmax(axis=-1)
    assert h.history["val_accuracy"][0] == pytest.approx((pred == y).mean(), rel=1e-6)


def test_softmax_over_axis_1_is_accepted():
    rs = np.random.RandomState(0)
    X, y = rs.rand(32, 2, 4, 4).astype(np.float32), rs.randint(0, 3, (32, 4, 4))
    net = mx.gluon.nn.Conv2D(3, 1)
    h = gluondist.fit(net, (X, y), loss=mx.gluon.loss.SoftmaxCrossEntropyLoss(axis=1),
                      epochs=2, batch_size=8, seed=0)
    assert 0 <= h.history["accuracy"][-1] <= 1
    with pytest.raises(ValueError, match="labels from 3 to 5 but the net outputs 3 classes"):
        gluondist.fit(mx.gluon.nn.Conv2D(3, 1), (X, y + 3),
                      loss=mx.gluon.loss.SoftmaxCrossEntropyLoss(axis=1))


def _planted(directory, state):
    path = directory / "ckpt-000050"
    path.mkdir()
    (path / "state.json").write_text(state)
    return path


@pytest.mark.parametrize("edit", [
    lambda s: s.update(optimizer="sgd"), lambda s: s.update(optimizer={}),
    lambda s: s.update(rng={}), lambda s: s.update(history={"loss": 3}),
    lambda s: s.update(epoch=10 ** 30), lambda s: s.update(epoch=-1),
    lambda s: s.update(seed=2 ** 40), lambda s: s.update(history={"loss": [[]] * 2}),
    lambda s: s["optimizer"]["states"].update({"0": {"array": "nope"}}),
])
def test_malformed_checkpoints_are_skipped_not_crashed_on(small, tmp_path, caplog, edit):
    _fit(small[0], epochs=1, checkpoint_dir=tmp_path)
    state = json.loads((tmp_path / "ckpt-000000" / "state.json").read_text())
    edit(state)
    bad = tmp_path / "ckpt-000050"
    shutil.copytree(tmp_path / "ckpt-000000", bad)
    (bad / "state.json").write_text(json.dumps(state))
    _, h = _fit(small[0], epochs=2, checkpoint_dir=tmp_path)
    assert len(h.history["loss"]) == 2 and "skipping checkpoint" in caplog.text


def test_fifos_deep_json_and_odd_run_files_never_hang_or_crash(small, tmp_path, caplog):
    _fit(small[0], epochs=1, checkpoint_dir=tmp_path)
    os.mkfifo(_planted(tmp_path, "{}") / "net.params")
    fifo = tmp_path / "ckpt-000060"
    fifo.mkdir()
    os.mkfifo(fifo / "state.json")
    _planted_deep = tmp_path / "ckpt-000070"
    _planted_deep.mkdir()
    (_planted_deep / "state.json").write_text("[" * 100000 + "]" * 100000)
    (tmp_path / "run.json").write_text('{"first": Infinity}')
    _, h = _fit(small[0], epochs=2, checkpoint_dir=tmp_path)
    assert len(h.history["loss"]) == 2  # resumed epoch 0's checkpoint, skipping the rest
    assert "ignoring" in caplog.text and caplog.text.count("skipping checkpoint") == 3
    (tmp_path / "run.json").unlink()
    (tmp_path / "run.json").mkdir()
    with pytest.raises(ValueError, match="run.json is not a regular file; remove it"):
        _fit(small[0], checkpoint_dir=tmp_path, resume=False)


def test_a_run_that_stopped_early_resumes_to_where_it_ended(small, tmp_path):
    class Feed(Callback):
        def on_epoch_end(self, run, epoch, logs):
            logs["val_loss"] = [3, 2, 2.5, 2.6, 2.7, 2.8][epoch]

    full, hf = _fit(small[0], epochs=6, val_data=small[1],
                    callbacks=[Feed(), EarlyStopping(patience=1)])
    _fit(small[0], epochs=6, val_data=small[1], checkpoint_dir=tmp_path,
         callbacks=[Feed(), EarlyStopping(patience=1)])
    again, h = _fit(small[0], epochs=6, val_data=small[1], checkpoint_dir=tmp_path,
                    callbacks=[Feed(), EarlyStopping(patience=1)])
    assert len(h.history["loss"]) == len(hf.history["loss"]) == 3
    assert param_sum(again) == param_sum(full)


def test_nan_in_a_dataset_stops_training_at_the_end_of_the_epoch(small, tmp_path):
    (X, y), _ = small
    X = X.copy()
    X[50, :] = np.nan
    with pytest.raises(FloatingPointError, match="became NaN or infinite in epoch 1/2"):
        _fit(mx.gluon.data.SimpleDataset(list(zip(X, y))), checkpoint_dir=tmp_path)
    assert checkpoint.load_latest(tmp_path) is None  # no checkpoint of a broken model


def test_adam_resumed_on_more_devices_keeps_every_copy_equal(small, tmp_path):
    adam = dict(optimizer="adam", optimizer_params={"learning_rate": 0.01})
    full, _ = _fit(small[0], epochs=3, **adam)
    _fit(small[0], epochs=2, ctx=1, checkpoint_dir=tmp_path, **adam)
    resumed, _ = _fit(small[0], epochs=3, ctx=2, checkpoint_dir=tmp_path, **adam)
    for p in resumed.collect_params().values():
        a, b = (d.asnumpy() for d in p.list_data())
        assert np.array_equal(a, b), p.name
    assert rel_diff(param_sum(full), param_sum(resumed)) <= 1e-4


def test_a_checkpoint_of_another_optimizer_is_refused_before_training(small, tmp_path):
    _fit(small[0], epochs=1, checkpoint_dir=tmp_path)
    net = mlp()
    with pytest.raises(ValueError, match="state of a SGD optimizer, not Adam.*resume=False"):
        _fit(small[0], net=net, checkpoint_dir=tmp_path, optimizer="adam",
             optimizer_params={"learning_rate": 0.01})


def test_metric_names_and_hints(small):
    _, h = _fit(small[0], epochs=1, val_data=small[1],
                metrics=[mx.metric.Accuracy(name="myacc")],
                callbacks=[EarlyStopping("val_myacc")])
    assert "val_myacc" in h.history
    with pytest.raises(ValueError, match="monitors 'val_acc' but the run records") as info:
        _fit(small[0], val_data=small[1], callbacks=[EarlyStopping("val_acc")])
    assert "pass val_data" not in str(info.value)
    with pytest.raises(ValueError, match=r"unknown metric 'top_k_accuracy' \(Please use "
                                         r"Accuracy if top_k is no more than 1\)"):
        _fit(small[0], metrics=["top_k_accuracy"])
    with pytest.raises(ValueError, match="optimizer_params for 'sgd'"):
        _fit(small[0], optimizer_params={"learning_rate": "fast"})
