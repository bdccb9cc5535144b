"""The rules fit follows where a user's choice could silently go wrong (issue 16): devices
without a kvstore, seeds, optimizer settings, losses, weights, one-hot labels, validation
batches, Checkpointers, a full disk, floating-point types, logs, and cleanup when fit raises."""
import csv
import os
import random
import subprocess
import threading

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import Callback, Checkpointer, CSVLogger, EarlyStopping, SaveBest, TensorBoard
from conftest import fit_mlp, mlp, param_sum, wait_until

gdata = mx.gluon.data


def params_of(net):
    return {k: p.data().asnumpy() for k, p in net._collect_params_with_prefix().items()}


def same_params(a, b):
    pa, pb = params_of(a), params_of(b)
    return pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)


class Interrupt(Callback):
    """Raises KeyboardInterrupt (a Ctrl-C) after batch ``batch`` of epoch ``epoch``; records
    the exception its on_exception hook hears of."""

    def __init__(self, epoch, batch):
        self.where, self.heard = (epoch, batch), None

    def on_batch_end(self, run, batch, logs):
        if (run.epoch, batch) == self.where:
            raise KeyboardInterrupt

    def on_exception(self, run, exc):
        self.heard = exc


def gluondist_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("gluondist-")]


# (2) several devices without a kvstore
def test_kvstore_none_on_several_devices_is_refused(small):
    with pytest.raises(ValueError, match="kvstore=None on 2 devices .* kvstore='auto' or "
                                         "'device'"):
        fit_mlp(small[0], ctx=2, kvstore=None)
    fit_mlp(small[0], epochs=1, ctx=1, kvstore=None)  # one device: nothing to reduce


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


def test_seed_makes_global_rng_transforms_reproducible_and_resume_exact(small, tmp_path):
    data = Noisy(*small[0])
    a, ha = fit_mlp(data, epochs=3, seed=0)
    np.random.seed(123)  # whatever the user's code did in between
    random.seed(123)
    b, hb = fit_mlp(data, epochs=3, seed=0)
    assert same_params(a, b) and ha.history["loss"] == hb.history["loss"]
    ckpt = tmp_path / "ckpt"
    fit_mlp(data, epochs=1, seed=0, checkpoint_dir=ckpt)
    np.random.rand(7)  # drawn between the two calls: the checkpoint's state is restored
    random.random()
    c, hc = fit_mlp(data, epochs=3, seed=0, checkpoint_dir=ckpt)
    assert same_params(a, c) and hc.history["loss"] == ha.history["loss"]


# (4) fit works on its own copy of the optimizer settings
def scheduled():
    return {"learning_rate": 0.1, "momentum": 0.9,
            "lr_scheduler": mx.lr_scheduler.FactorScheduler(step=5, factor=0.5)}


def test_a_shared_lr_scheduler_is_not_changed_by_fit(small, tmp_path):
    fresh, _ = fit_mlp(small[0], epochs=3, optimizer_params=scheduled())
    shared = scheduled()
    first, _ = fit_mlp(small[0], epochs=3, optimizer_params=shared)
    second, _ = fit_mlp(small[0], epochs=3, optimizer_params=shared)
    assert same_params(fresh, first) and same_params(fresh, second)
    assert shared["lr_scheduler"].base_lr == 0.01  # MXNet's default, never advanced by fit
    # the notebook case: Ctrl-C, then the same call (same dict) resumes exactly
    net, ckpt = mlp(), tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        fit_mlp(small[0], epochs=3, net=net, optimizer_params=shared, checkpoint_dir=ckpt,
                callbacks=[Interrupt(1, 5)])
    fit_mlp(small[0], epochs=3, net=net, optimizer_params=shared, checkpoint_dir=ckpt)
    assert same_params(fresh, net)


def test_an_optimizer_instance_is_not_changed_by_fit(small):
    opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9,
                           lr_scheduler=mx.lr_scheduler.FactorScheduler(step=5, factor=0.5))
    a, _ = fit_mlp(small[0], epochs=2, optimizer=opt, optimizer_params=None)
    b, _ = fit_mlp(small[0], epochs=2, optimizer=opt, optimizer_params=None)
    assert same_params(a, b) and opt.num_update == 0


# (5) one loss value per sample
class MeanLoss(mx.gluon.loss.Loss):
    def __init__(self, reduce):
        super().__init__(None, 0)
        self.inner, self.reduce = mx.gluon.loss.SoftmaxCrossEntropyLoss(), reduce

    def hybrid_forward(self, F, pred, label):
        return getattr(self.inner(pred, label), self.reduce)()


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_a_loss_that_reduces_the_batch_is_refused(small, reduce):
    with pytest.raises(ValueError, match=r"gives shape \(1,\) for a batch of 30 samples of "
                                         "train_data: fit needs one loss value per sample"):
        fit_mlp(small[0], loss=MeanLoss(reduce))


class ElementLoss(mx.gluon.loss.Loss):
    """A value per sample and output unit, not averaged over the units."""

    def __init__(self):
        super().__init__(None, 0)

    def hybrid_forward(self, F, pred, label):
        return F.square(pred - F.one_hot(label, 10))


def test_a_loss_with_a_value_per_unit_is_refused(small):
    with pytest.raises(ValueError, match=r"gives shape \(30, 10\) for a batch of 30 samples "
                                         r"of train_data: fit needs one loss value per sample, "
                                         r"shape \(30,\)"):
        fit_mlp(small[0], loss=ElementLoss())


# (6) sample weights are cast like labels
@pytest.mark.parametrize("kind", ["python float", "python int", "float64", "array float64"])
def test_dataset_weights_of_any_number_type(small, kind):
    X, y = small[0]
    w = (np.arange(len(X)) % 3 + 1).astype(np.float64)
    ref, href = fit_mlp((X, y, w.astype(np.float32)), epochs=2)
    if kind == "array float64":
        data = gdata.ArrayDataset(X, y, w)
    else:
        cast = {"python float": float, "python int": int, "float64": np.float64}[kind]
        data = gdata.SimpleDataset([(X[i], y[i], cast(w[i])) for i in range(len(X))])
    net, h = fit_mlp(data, epochs=2)
    assert param_sum(net) == pytest.approx(param_sum(ref), rel=1e-5)
    assert h.history["loss"] == pytest.approx(href.history["loss"], rel=1e-5)


# (7) one-hot labels: categorical accuracy; a one-unit output: accuracy refused
@pytest.mark.parametrize("metrics", ["auto", "acc"])
def test_one_hot_labels_report_categorical_accuracy(small, metrics):
    (X, y), (Xv, yv) = small
    onehot = lambda labels: np.eye(10, dtype=np.float32)[labels.astype(int)]  # noqa: E731
    _, sparse = fit_mlp((X, y), val_data=(Xv, yv), metrics=metrics)
    _, dense = fit_mlp((X, onehot(y)), val_data=(Xv, onehot(yv)), metrics=metrics,
                       loss=mx.gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False))
    assert dense.history["accuracy"] == pytest.approx(sparse.history["accuracy"], abs=1e-6)
    assert dense.history["val_accuracy"] == pytest.approx(sparse.history["val_accuracy"],
                                                          abs=1e-6)


def test_accuracy_of_a_one_unit_output_is_refused(small):
    X, y = small[0]
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, activation="relu"), mx.gluon.nn.Dense(1))
    with pytest.raises(ValueError, match="accuracy needs one output per class"):
        gluondist.fit(net, (X, (y > 4).astype(np.float32)), metrics="acc",
                      loss=mx.gluon.loss.SigmoidBinaryCrossEntropyLoss())


# (8) validation takes the val loader's batch size, as evaluate does
def test_validation_uses_the_val_loaders_batch_size(small):
    (X, y), (Xv, yv) = small
    val = gdata.DataLoader(gdata.ArrayDataset(Xv, yv), batch_size=48, last_batch="discard")
    net, h = fit_mlp((X, y), val_data=val, epochs=2, batch_size=30)
    scores = gluondist.evaluate(net, val)
    assert h.history["val_loss"][-1] == pytest.approx(scores["loss"], rel=1e-6)
    assert h.history["val_accuracy"][-1] == pytest.approx(scores["accuracy"], abs=1e-9)
    own = gluondist.evaluate(net, (Xv[:192], yv[:192]))  # 4 batches of 48: 192 samples scored
    assert scores["loss"] == pytest.approx(own["loss"], rel=1e-5)


# (9) a Checkpointer passed is what fit resumes from
def test_a_passed_checkpointer_is_resumed_from(small, tmp_path):
    ref, href = fit_mlp(small[0], epochs=3)
    net = mlp()
    fit_mlp(small[0], epochs=2, net=net, callbacks=[Checkpointer(tmp_path / "b")])
    _, h = fit_mlp(small[0], epochs=3, net=net, callbacks=[Checkpointer(tmp_path / "b")])
    assert h.history["loss"] == href.history["loss"] and same_params(ref, net)
    assert sorted(os.listdir(tmp_path / "b")) == ["ckpt-000001", "ckpt-000002"]
    fit_mlp(small[0], epochs=4, net=net, checkpoint_dir=tmp_path / "b" / ".." / "b",
            callbacks=[Checkpointer(tmp_path / "b")])  # the same directory: fine
    with pytest.raises(ValueError, match="checkpoint_dir .*a and the Checkpointer's directory "
                                         ".*b differ"):
        fit_mlp(small[0], checkpoint_dir=tmp_path / "a", callbacks=[Checkpointer(tmp_path / "b")])
    with pytest.raises(ValueError, match="holds 2 Checkpointers"):
        fit_mlp(small[0], callbacks=[Checkpointer(tmp_path / "b"), Checkpointer(tmp_path / "c")])


# (10) a full disk
@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_names_the_checkpoint_and_keeps_the_earlier_ones(small, small_disk):
    class Fill(Callback):  # the disk fills up after the first checkpoint
        def on_epoch_begin(self, run, epoch):
            if epoch == 1:
                try:
                    with open(small_disk / "filler", "wb") as f:
                        f.write(b"\0" * (1 << 20))  # more than the disk holds
                except OSError:
                    pass  # full

    ckpt = small_disk / "ckpt"
    with pytest.raises(OSError, match=f"cannot write the checkpoint of epoch 2 to {ckpt}: no "
                                      "space left on device; the earlier checkpoints are kept"):
        fit_mlp(small[0], epochs=3, net=mlp(64), checkpoint_dir=ckpt, callbacks=[Fill()])
    assert os.listdir(ckpt) == ["ckpt-000000"]  # no temporary entry left
    assert gluondist.checkpoint.load_latest(ckpt).epoch == 0


# (11) one dtype rule: everything is fed as float32; other nets refused; predict's errors
def test_float16_arrays_and_datasets_are_cast_alike(small):
    X, y = small[0]
    ref, _ = fit_mlp((X.astype(np.float16).astype(np.float32), y))
    arrays, _ = fit_mlp((X.astype(np.float16), y))
    dataset, _ = fit_mlp(gdata.ArrayDataset(X.astype(np.float16), y))
    assert same_params(ref, arrays) and same_params(ref, dataset)


def test_a_float64_net_is_refused_in_one_line(small):
    net = mlp()
    net.initialize()
    net(mx.nd.ones((1, 64)))  # shapes known: the net is ready to predict
    net.cast("float64")
    for call in (lambda: gluondist.fit(net, small[0]),
                 lambda: gluondist.predict(net, small[0][0]),
                 lambda: gluondist.evaluate(net, small[0])):
        with pytest.raises(ValueError, match=r"^the net's parameters are float64 \(net.cast\), "
                                             r".*cast it back with net.cast\('float32'\)$"):
            call()


def test_predict_errors_are_in_our_words(small):
    net, _ = fit_mlp(small[0], epochs=1)
    with pytest.raises(ValueError, match=r"net cannot take the inputs given to predict .* "
                                         r"give predict X alone, not \(X, y\)"):
        gluondist.predict(net, small[0])
    with pytest.raises(ValueError, match="net cannot take the inputs given to predict "
                                         r"\(shape \(256, 3\)\): .*"):
        gluondist.predict(net, small[0][0][:, :3])


# (12) resumed CSV logs keep every row the History has
@pytest.mark.parametrize("append", [True, False])
def test_a_resumed_csv_log_has_every_epoch(small, tmp_path, append):
    ckpt, path = tmp_path / "ckpt", tmp_path / "log.csv"
    with pytest.raises(KeyboardInterrupt):
        fit_mlp(small[0], epochs=5, checkpoint_dir=ckpt,
                callbacks=[CSVLogger(path, append=append), Interrupt(3, 2)])
    _, h = fit_mlp(small[0], epochs=5, checkpoint_dir=ckpt,
                   callbacks=[CSVLogger(path, append=append)])
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3, 4]
    assert [float(r["loss"]) for r in rows] == pytest.approx(h.history["loss"], rel=1e-12)


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


# the traps
def test_a_list_of_rows_as_X_says_what_to_do(small):
    X, y = small[0]
    with pytest.raises(ValueError) as info:
        gluondist.fit(mlp(), (list(X[:50]), y[:50]))
    message = str(info.value)
    assert "X is a list of 50 arrays, which fit reads as 50 inputs" in message
    assert "np.stack(X)" in message and len(message) < 300
    net, _ = fit_mlp(small[0], epochs=1)
    with pytest.raises(ValueError) as info:  # 64 rows of 64: as long as each other
        gluondist.predict(net, list(X[:64]))
    assert "(64 inputs)" in str(info.value) and len(str(info.value)) < 400


@pytest.mark.parametrize("sample, kinds", [
    (lambda x, y: (x, None), r"\(ndarray float32, NoneType\)"),
    (lambda x, y: (x, "cat"), r"\(ndarray float32, str\)"),
    (lambda x, y: (x, [1.0, "x"]), r"\(ndarray float32, \(float, str\)\)"),
    (lambda x, y: (x, [1, 2]), r"\(ndarray float32, \(int, int\)\)")])
def test_the_sample_that_is_not_numbers_is_named(small, sample, kinds):
    X, y = small[0]  # only sample 7 is bad: the message names it, not the batch's first
    data = gdata.SimpleDataset([sample(X[i], y[i]) if i == 7 else (X[i], y[i])
                                for i in range(len(X))])
    with pytest.raises(ValueError, match=r"samples cannot be stacked into a batch \(sample 7 "
                                         f"is {kinds}\\): every field must be a number"):
        gluondist.fit(mlp(), data)


def test_samples_with_a_field_more_are_refused(small):
    X, y = small[0]  # MXNet's batchify would drop sample 7's weight without a word
    data = gdata.SimpleDataset([(X[i], y[i], 1.0) if i == 7 else (X[i], y[i])
                                for i in range(len(X))])
    with pytest.raises(ValueError, match=r"samples have different numbers of fields \(sample 7 "
                                         r"has 3, most have 2\)"):
        gluondist.fit(mlp(), data)


def test_dict_samples_are_refused_with_a_hint(small):
    X, y = small[0]
    data = gdata.SimpleDataset([{"x": X[i], "y": y[i]} for i in range(len(X))])
    with pytest.raises(ValueError, match=r"samples are dicts \(keys \['x', 'y'\]\).* "
                                         r"dataset.transform"):
        gluondist.fit(mlp(), data)


class TwoInputs(mx.gluon.HybridBlock):
    def __init__(self):
        super().__init__()
        self.a, self.b = mx.gluon.nn.Dense(10), mx.gluon.nn.Dense(10)

    def hybrid_forward(self, F, x1, x2=None):
        return self.a(x1) if x2 is None else self.a(x1) + self.b(x2)


def test_a_two_input_net_never_silently_loses_an_input(small):
    X, y = small[0]
    net = TwoInputs()
    gluondist.fit(net, ((X, X * 2), y), epochs=1)
    with pytest.raises(ValueError, match=r"reads each sample of 2 arrays as \(inputs, labels\) .*"
                                         "but the net takes 2 inputs"):
        gluondist.predict(net, gdata.ArrayDataset(X, X * 2))
    both = gluondist.predict(net, (X, X * 2))
    assert both.shape == (len(X), 10)


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


def test_checkpoint_dir_that_is_a_file_says_so(small, tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="checkpoint_dir .*f is a file, not a directory"):
        fit_mlp(small[0], checkpoint_dir=tmp_path / "f")


def test_a_val_loader_that_would_drop_every_sample_is_refused(small):
    X, y = small[1]
    loader = gdata.DataLoader(gdata.ArrayDataset(X[:100], y[:100]), batch_size=128,
                              last_batch="discard")
    message = (r"its DataLoader drops a last, partial batch \(last_batch='discard'\) and its "
               r"batch of 128 x 1 worker\(s\) exceeds its 100 samples")
    with pytest.raises(ValueError, match="val_data: " + message):
        fit_mlp(small[0], val_data=loader)
    net, _ = fit_mlp(small[0])
    with pytest.raises(ValueError, match="data: " + message):
        gluondist.evaluate(net, loader)
