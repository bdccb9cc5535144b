"""Callbacks: the hooks and their order, stops, EarlyStopping, best weights and
SaveBest, and what every callback gets when fit raises."""
import os
import re
import threading
from dataclasses import fields

import mxnet as mx
import pytest

import gluondist
from gluondist import Callback, EarlyStopping, SaveBest, TensorBoard

from conftest import fit_mlp, mlp, wait_until
from fits import Feed, Interrupt


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


gdata = mx.gluon.data


def gluondist_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("gluondist-")]


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


def test_the_run_callbacks_see_is_what_the_callback_docs_describe(small):
    """Every attribute Callback's docstring names, and nothing else: fit's loop keeps its own
    state (the checked call, the step, the sampler) out of the Run."""
    from gluondist.training.run import Run
    documented = set(re.findall(r"``run\.(\w+)``", Callback.__doc__))
    public = {n for n in dir(Run) if not n.startswith("_")} | {f.name for f in fields(Run)}
    assert documented == public
    seen = {}

    class Look(Callback):
        def on_train_begin(self, run):
            seen.update({name: getattr(run, name) for name in public}, attrs=set(vars(run)))
    net = mlp()
    h = gluondist.fit(net, small[0], epochs=1, seed=3, callbacks=[Look()])
    assert seen["attrs"] == {f.name for f in fields(Run)}  # no loop state on the instance
    assert seen["net"] is net and isinstance(seen["trainer"], mx.gluon.Trainer)
    assert seen["history"] is h and seen["callbacks"].first(Look) is not None
    assert (seen["epochs"], seen["start"], seen["epoch"], seen["steps"], seen["seed"]) == \
        (1, 0, 0, 13, 3)  # 400 samples in batches of 32
    assert (seen["rank"], seen["num_workers"], seen["mode"], seen["agree"],
            seen["updates_on_servers"], seen["stop_training"]) == (0, 1, None, False, False, False)


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


def test_early_stopping_names_a_typo_and_knows_our_metrics(small):
    with pytest.raises(ValueError, match="EarlyStopping monitors 'val_los' but the run records "
                                         "loss, accuracy, val_loss, val_accuracy"):
        fit_mlp(small[0], val_data=small[1], callbacks=[EarlyStopping("val_los")])
    for name in ("mse", "mae", "rmse", "cross-entropy"):
        stop = EarlyStopping(f"val_{name}")
        stop.check(["loss", name, "val_loss", f"val_{name}"])
        assert stop.mode == "min"
    best = SaveBest(os.devnull, monitor="val_top_k_accuracy_5")
    best.check(["val_top_k_accuracy_5"])
    assert best.mode == "max"


def test_restore_best_weights_leaves_the_best_epoch(small):
    stop = EarlyStopping("val_loss", patience=20, restore_best_weights=True)
    # lr 1.5 overshoots: val_loss is not at its best in the last epoch
    net, h = fit_mlp(small[0], epochs=6, val_data=small[1], callbacks=[stop],
                     optimizer_params={"learning_rate": 1.5, "momentum": 0.9})
    best = min(h.history["val_loss"])
    assert h.history["val_loss"][-1] != best
    assert gluondist.evaluate(net, small[1])["loss"] == pytest.approx(best, rel=1e-6)


def test_save_best_writes_the_best_weights_for_plain_mxnet(small, tmp_path):
    path = tmp_path / "best.params"
    net, h = fit_mlp(small[0], epochs=6, val_data=small[1], callbacks=[SaveBest(path)],
                     optimizer_params={"learning_rate": 1.5, "momentum": 0.9})
    loaded = mlp()
    loaded.load_parameters(str(path))
    best = min(h.history["val_loss"])
    assert gluondist.evaluate(loaded, small[1])["loss"] == pytest.approx(best, rel=1e-6)
    assert [p.name for p in tmp_path.iterdir()] == ["best.params"]  # no temporary file left


def test_an_unusable_save_best_path_fails_before_training(small, tmp_path):
    for path in (tmp_path / "missing" / "best.params", tmp_path):
        with pytest.raises(ValueError, match="SaveBest cannot write"):
            fit_mlp(small[0], val_data=small[1], callbacks=[SaveBest(path)], epochs=1)


# 18.5 and the notebook trap: an interrupted fit closes what it opened
def test_an_interrupted_fit_closes_its_threads_writer_and_keeps_its_checkpoints(small,
                                                                                tmp_path):
    ckpt, board = tmp_path / "ckpt", TensorBoard(tmp_path / "tb", batch_every=2)
    kept = []
    for attempt in range(5):  # five Ctrl-Cs, each traceback kept as a notebook keeps it
        stop = Interrupt(1, 3)
        with pytest.raises(KeyboardInterrupt) as info:
            fit_mlp(small[0], epochs=3, checkpoint_dir=ckpt, callbacks=[board, stop],
                    resume=False, val_data=small[1])
        kept.append(info)
        assert isinstance(stop.heard, KeyboardInterrupt)
        assert board._writer is None
        wait_until(lambda: not gluondist_threads(), timeout=5, message="no gluondist- thread")
    assert sorted(os.listdir(ckpt)) == ["ckpt-000003", "ckpt-000004", "run.json"]
    # the interrupted run's checkpoint (its epoch 1) is as it was written
    assert gluondist.checkpoint.load_latest(ckpt).epoch == 0
    # a DataLoader with workers (the loader's pool is its own; fit's thread must go)
    loader = gdata.DataLoader(gdata.ArrayDataset(*small[0]), batch_size=30, num_workers=2)
    with pytest.raises(KeyboardInterrupt):
        fit_mlp(loader, epochs=2, callbacks=[Interrupt(0, 2)])
    wait_until(lambda: not gluondist_threads(), timeout=5, message="no gluondist- thread")


def test_an_error_in_one_callbacks_on_exception_still_reaches_the_others(small, caplog):
    class Broken(Callback):
        def on_exception(self, run, exc):
            raise RuntimeError("broken hook")

    stop = Interrupt(0, 1)
    with pytest.raises(KeyboardInterrupt):
        fit_mlp(small[0], callbacks=[Broken(), stop])
    assert isinstance(stop.heard, KeyboardInterrupt) and "Broken.on_exception failed" in caplog.text


def test_an_error_in_one_callbacks_on_train_end_still_lets_the_others_close(small, tmp_path):
    class Broken(Callback):
        def on_train_end(self, run):
            raise RuntimeError("broken end")

    board = TensorBoard(tmp_path / "tb")
    with pytest.raises(RuntimeError, match="broken end"):
        fit_mlp(small[0], callbacks=[Broken(), board])
    assert board._writer is None
