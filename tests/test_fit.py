import os
import signal
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import checkpoint
from gluondist.callbacks import Callback
from gluondist.training.monitored import EarlyStopping
from conftest import SCRIPTS, curves, mlp, param_sum, rel_diff, wait_until

from conftest import OPT

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
    h.plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _run(ctx, data, epochs=2, seed=7, **kw):
    net = mlp()
    params = dict(OPT, **kw.pop("optimizer_params", {}))
    h = gluondist.fit(net, data, epochs=epochs, batch_size=kw.pop("batch_size", 30), ctx=ctx,
                      seed=seed, optimizer_params=params, **kw)
    return net, h


@pytest.mark.parametrize("extra", [
    {},
    {"optimizer_params": {"clip_global_norm": 0.5,
                          "lr_scheduler": None}},
])
def test_two_contexts_end_where_one_does(small, extra):
    extra = dict(extra)
    if "optimizer_params" in extra:
        extra["optimizer_params"]["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(5, 0.5)
    one, h1 = _run([mx.cpu(0)], small[0], **dict(extra))
    if "optimizer_params" in extra:
        extra["optimizer_params"]["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(5, 0.5)
    two, h2 = _run([mx.cpu(0), mx.cpu(1)], small[0], **extra)
    assert rel_diff(param_sum(one), param_sum(two)) <= 1e-4
    assert np.allclose(h1.history["loss"], h2.history["loss"], rtol=1e-4)


def test_same_seed_same_result_different_seed_different(small):
    a, _ = _run(None, small[0], seed=1)
    b, _ = _run(None, small[0], seed=1)
    c, _ = _run(None, small[0], seed=2)
    assert param_sum(a) == param_sum(b) != param_sum(c)


def test_clipping_bounds_each_step(small):
    (X, y), _ = small
    free, _ = _run(None, (X, y * 0 + 9), epochs=1, optimizer_params={"momentum": 0.0})
    clipped, _ = _run(None, (X, y * 0 + 9), epochs=1,
                      optimizer_params={"momentum": 0.0, "clip_global_norm": 1e-3})
    start = mlp()
    gluondist.fit(start, (X, y), epochs=0, seed=7)  # same init, no step
    moved = lambda n: abs(param_sum(n) - param_sum(start))
    assert moved(clipped) < moved(free) / 10


def test_accepts_ndarrays_datasets_and_dataloaders(small):
    (X, y), _ = small
    ref, _ = _run(None, (X, y), batch_size=40)
    as_nd, _ = _run(None, (mx.nd.array(X), mx.nd.array(y)), batch_size=40)
    dataset = mx.gluon.data.ArrayDataset(mx.nd.array(X), mx.nd.array(y))
    as_ds, _ = _run(None, dataset, batch_size=40)
    loader = mx.gluon.data.DataLoader(dataset, batch_size=40, shuffle=True)
    net = mlp()
    gluondist.fit(net, loader, epochs=2, seed=7, optimizer_params=OPT)  # its batch size
    for other in (as_nd, as_ds, net):
        assert rel_diff(param_sum(ref), param_sum(other)) <= 1e-5


def test_an_initialised_net_is_kept(small):
    net = mlp()
    net.initialize(mx.init.Constant(0.01))
    net(mx.nd.ones((1, 64)))
    before = param_sum(net)
    gluondist.fit(net, small[0], epochs=0)
    assert param_sum(net) == before


@pytest.mark.parametrize("kwargs,message", [
    (dict(train_data=(np.zeros((5, 64)), np.zeros(4))), "X has 5 but y has 4 samples"),
    (dict(train_data=(np.zeros((0, 64)), np.zeros(0))), "empty"),
    (dict(batch_size=401), "exceeds the 400 training samples"),
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(train_data=(np.zeros((5, 64)), np.array([0, 1, 2, 10, 1]))), "labels from 0 to 10"),
    (dict(train_data=(np.zeros((5, 64)), np.array([0, 1, 2, -1, 1]))), "labels from -1"),
    (dict(val_data=(np.zeros((5, 64)), np.array([0, 1, 2, 12, 1]))), "val_data has labels"),
    (dict(optimizer="sgdd"), "unknown optimizer 'sgdd'"),
    (dict(optimizer_params={"learning_rat": 0.1}), "optimizer_params for 'sgd'"),
    (dict(optimizer_params={"clip_global_norm": -1}), "clip_global_norm"),
    (dict(metrics=["accuracy", "acuracy"]), "unknown metric 'acuracy'"),
    (dict(train_data=(np.zeros((5, 3)), np.zeros(5))), "net cannot take a batch of train_data .*Shape inconsistent"),
    (dict(train_data="data.csv"), "must be an \\(X, y\\) tuple"),
    (dict(kvstore="dist"), "unknown kvstore kind"),
    (dict(kvstore="dist_sync"), "gluondist launch"),
    (dict(ctx="gpu:0"), "GPU"),
    (dict(epochs=-1), "epochs"),
])
def test_bad_input_is_refused_before_training(small, kwargs, message):
    net = mlp(8)
    net.initialize()
    net(mx.nd.ones((1, 64)))
    before = param_sum(net)
    args = dict(train_data=small[0], epochs=1)
    args.update(kwargs)
    with pytest.raises((ValueError, RuntimeError), match=message):
        gluondist.fit(net, **args)
    assert param_sum(net) == before


class Recorder(Callback):
    def __init__(self, stop_at_batch=None):
        self.events, self.stop_at_batch = [], stop_at_batch

    def on_train_begin(self, run):
        self.events.append("begin")

    def on_epoch_begin(self, run, epoch):
        self.events.append(f"epoch {epoch}")

    def on_batch_end(self, run, batch, logs):
        self.events.append(f"batch {batch} {logs['size']}")
        assert logs["loss"] > 0
        if batch == self.stop_at_batch:
            run.stop_training = True

    def on_epoch_end(self, run, epoch, logs):
        self.events.append(f"end {epoch} {sorted(logs)}")

    def on_train_end(self, run):
        self.events.append("done")


def test_callback_hooks_run_in_order(small):
    (X, y), _ = small
    rec = Recorder()
    gluondist.fit(mlp(), (X[:90], y[:90]), epochs=2, batch_size=40, callbacks=[rec])
    batches = ["batch 0 40", "batch 1 40", "batch 2 10"]
    keys = ("['accuracy', 'compute_seconds', 'data_seconds', 'epoch_seconds', 'loss', "
            "'samples_per_s', 'sync_seconds']")
    assert rec.events == ["begin", "epoch 0", *batches, f"end 0 {keys}",
                          "epoch 1", *batches, f"end 1 {keys}", "done"]


def test_a_callback_stops_training_at_the_end_of_the_epoch(small):
    rec = Recorder(stop_at_batch=1)
    h = gluondist.fit(mlp(), small[0], epochs=5, batch_size=40, callbacks=[rec])
    assert len(h.history["loss"]) == 1
    assert [e for e in rec.events if e.startswith("batch")] == [f"batch {i} 40" for i in range(10)]


class Feed(Callback):
    """Replaces the logs' values so that EarlyStopping sees a scripted series."""

    def __init__(self, key, values):
        self.key, self.values = key, values

    def on_epoch_end(self, run, epoch, logs):
        logs[self.key] = self.values[epoch]


@pytest.mark.parametrize("monitor,mode,values,stops_after", [
    ("val_loss", "auto", [3, 2, 2.5, 2.6, 1], 3),  # min: worse once (patience 1) -> stop
    ("val_loss", "min", [3, 2, 1, 0.5, 0.1], 5),
    ("val_accuracy", "auto", [0.5, 0.6, 0.55, 0.5, 0.9], 3),  # max, not min
    ("val_accuracy", "max", [0.5, 0.6, 0.7, 0.8, 0.9], 5),
])
def test_early_stopping_respects_its_mode(small, monitor, mode, values, stops_after):
    stopper = EarlyStopping(monitor, mode=mode, patience=1)
    h = gluondist.fit(mlp(), small[0], val_data=small[1], epochs=5,
                      callbacks=[Feed(monitor, values), stopper])
    assert len(h.history["loss"]) == stops_after


def test_early_stopping_refuses_to_guess():
    with pytest.raises(ValueError, match="mode='min' or mode='max'"):
        EarlyStopping("val_top_k", mode="auto").check(["loss", "val_top_k"])
    with pytest.raises(ValueError, match="'min', 'max' or 'auto'"):
        EarlyStopping("val_loss", mode="up")


def test_resume_continues_where_an_interrupted_run_stopped(small, tmp_path):
    full, hf = _run(None, small[0], epochs=4)
    first, _ = _run(None, small[0], epochs=2, checkpoint_dir=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000", "ckpt-000001"]
    resumed, hr = _run(None, small[0], epochs=4, seed=99, checkpoint_dir=tmp_path)  # seed kept
    assert rel_diff(param_sum(full), param_sum(resumed)) <= 1e-4
    assert np.allclose(hr.history["loss"], hf.history["loss"], rtol=1e-4)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000002", "ckpt-000003"]


def test_resume_false_starts_over(small, tmp_path):
    _run(None, small[0], epochs=2, checkpoint_dir=tmp_path)
    _, h = _run(None, small[0], epochs=1, checkpoint_dir=tmp_path, resume=False)
    assert len(h.history["loss"]) == 1


def test_checkpoint_of_another_model_is_refused(small, tmp_path):
    _run(None, small[0], epochs=1, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="checkpoint of a different model"):
        gluondist.fit(mlp(hidden=16), small[0], epochs=2, checkpoint_dir=tmp_path)


def test_kill_during_a_checkpoint_write_keeps_the_previous_one(tmp_path):
    ckpt, marker = tmp_path / "ckpt", tmp_path / "writing"
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "checkpoint_hang.py"), str(ckpt),
                             str(marker)])
    try:
        wait_until(marker.exists, timeout=120, message="the checkpoint write to begin")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    names = set(os.listdir(ckpt))
    assert "ckpt-000000" in names and len(names) == 2
    assert (names - {"ckpt-000000"}).pop().startswith(".ckpt-000001.")
    assert checkpoint.load_latest(ckpt).epoch == 0

    # Resuming from epoch 0's checkpoint ends where an uninterrupted run does.
    rs = np.random.RandomState(0)
    X, y = rs.rand(200, 8).astype(np.float32), rs.randint(0, 3, 200)

    def net3():
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
        return net
    resumed, full = net3(), net3()
    h = gluondist.fit(resumed, (X, y), epochs=3, batch_size=16, seed=5, checkpoint_dir=ckpt,
                      optimizer_params=OPT)
    gluondist.fit(full, (X, y), epochs=3, batch_size=16, seed=5, optimizer_params=OPT)
    assert len(h.history["loss"]) == 3
    assert rel_diff(param_sum(full), param_sum(resumed)) <= 1e-4
    assert sorted(os.listdir(ckpt)) == ["ckpt-000001", "ckpt-000002"]  # stray tmp gone
