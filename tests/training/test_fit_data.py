"""The data fit takes and what it refuses: arrays, Datasets and DataLoaders (their
workers, samplers and last_batch), sample and class weights, labels,
number types, NaN, and the samples MXNet cannot batch."""
import os

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import Callback

from conftest import assert_same_history, assert_same_params, fit_mlp, mlp, OPT, params_of
from fits import fit_on, three_classes


class PidDataset(mx.gluon.data.Dataset):
    """Digits that leave a file named after the process that loaded each sample."""

    def __init__(self, X, y, where):
        self.X, self.y, self.where = X, y, where

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        open(os.path.join(self.where, str(os.getpid())), "w").close()
        return self.X[i], self.y[i]


class Sizes(Callback):
    def __init__(self):
        self.sizes = []

    def on_batch_end(self, run, batch, logs):
        self.sizes.append(logs["size"])


def _net3():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, activation="relu"), mx.gluon.nn.Dense(3))
    return net


gdata = mx.gluon.data


class TwoInputs(mx.gluon.HybridBlock):
    def __init__(self):
        super().__init__()
        self.a, self.b = mx.gluon.nn.Dense(10), mx.gluon.nn.Dense(10)

    def hybrid_forward(self, F, x1, x2=None):
        return self.a(x1) if x2 is None else self.a(x1) + self.b(x2)


def _three_classes():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
    return net


def _labels_dataset(X, y, wrap):
    ds = mx.gluon.data.SimpleDataset(list(zip(X, y)))
    return ds.transform_first(lambda x: x * 1.0) if wrap == "transform_first" else ds


def test_accepts_ndarrays_datasets_and_dataloaders(small):
    (X, y), _ = small
    ref, href = fit_on(None, (X, y), batch_size=40)
    as_nd, h_nd = fit_on(None, (mx.nd.array(X), mx.nd.array(y)), batch_size=40)
    dataset = mx.gluon.data.ArrayDataset(mx.nd.array(X), mx.nd.array(y))
    as_ds, h_ds = fit_on(None, dataset, batch_size=40)
    loader = mx.gluon.data.DataLoader(dataset, batch_size=40, shuffle=True)
    net = mlp()
    h_loader = gluondist.fit(net, loader, epochs=2, seed=7, optimizer_params=OPT)  # its batch
    for other, h in ((as_nd, h_nd), (as_ds, h_ds), (net, h_loader)):
        assert_same_params(other, ref, 1e-5)
        assert_same_history(h, href)


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
    before = params_of(net)
    args = dict(train_data=small[0], epochs=1)
    args.update(kwargs)
    with pytest.raises((ValueError, RuntimeError), match=message):
        gluondist.fit(net, **args)
    assert_same_params(net, before)


def test_the_dataloaders_worker_processes_load_the_data(small, tmp_path):
    (X, y), _ = small
    loader = mx.gluon.data.DataLoader(PidDataset(X, y, str(tmp_path)), batch_size=40,
                                      num_workers=2, shuffle=True)
    by_workers, h = fit_mlp(loader, epochs=2, batch_size=40)
    pids = {int(p) for p in os.listdir(tmp_path)}
    assert len(pids - {os.getpid()}) == 2  # the two worker processes
    in_process, _ = fit_mlp(mx.gluon.data.ArrayDataset(X, y), epochs=2, batch_size=40)
    assert_same_params(by_workers, in_process, 1e-5)  # same batches


def test_last_batch_discard_drops_the_last_partial_batch(small):
    (X, y), _ = small
    sizes = Sizes()
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=30,
                                      last_batch="discard")
    fit_mlp(loader, epochs=1, callbacks=[sizes])
    assert sizes.sizes == [30] * 13  # 400 = 13 x 30 + 10: the 10 are dropped
    kept = Sizes()
    fit_mlp(mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=30), epochs=1,
            callbacks=[kept])
    assert kept.sizes == [30] * 13 + [10]
    with pytest.raises(ValueError, match="last_batch='rollover'.*use 'keep' or 'discard'"):
        fit_mlp(mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=30,
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
        fit_mlp(loader, epochs=1)


def test_a_dataloaders_sampler_is_never_silently_dropped(small):
    (X, y), _ = small
    dataset = mx.gluon.data.ArrayDataset(X, y)
    subset = mx.gluon.data.DataLoader(dataset, batch_size=10,
                                      sampler=mx.gluon.data.SequentialSampler(50))
    with pytest.raises(ValueError, match=r"\(SequentialSampler\) draws 50 indices covering 50 "
                                         "of the dataset's 400 samples"):
        fit_mlp(subset)
    custom = mx.gluon.data.DataLoader(dataset, batch_sampler=[[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="cannot follow a custom batch_sampler"):
        fit_mlp(custom)


class Drawn(mx.gluon.data.Sampler):
    """A sampler of a user's own kind, drawing the indices it is given."""

    def __init__(self, indices):
        self.indices = list(indices)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def test_a_sampler_of_any_kind_that_draws_every_sample_once_is_an_order_fit_replaces(small):
    (X, y), _ = small
    dataset = mx.gluon.data.ArrayDataset(X, y)
    backwards = mx.gluon.data.DataLoader(dataset, batch_size=40,
                                         sampler=Drawn(reversed(range(len(X)))))
    net, h = fit_mlp(backwards, epochs=2, seed=3)
    _, h_same = fit_mlp(mx.gluon.data.DataLoader(dataset, batch_size=40), epochs=2, seed=3)
    assert h.history["loss"] == h_same.history["loss"]  # fit's own order, whatever the sampler's


@pytest.mark.parametrize("indices, says", [
    (list(range(399)) + [0], "draws 400 indices covering 399 of the dataset's 400 samples"),
    (list(range(400)) * 2, "draws more than 400 indices covering 400 of"),
    (list(range(1, 401)), "draws 400 indices covering 399 of"),  # 400 is past the end
])
def test_a_sampler_that_repeats_or_leaves_out_samples_is_refused_saying_so(small, indices, says):
    (X, y), _ = small
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=40,
                                      sampler=Drawn(indices))
    with pytest.raises(ValueError, match=f"^train_data: the DataLoader's sampler \\(Drawn\\) "
                                         f"{says}.*once per epoch"):
        fit_mlp(loader)


def test_a_sampler_that_draws_no_indices_is_refused_in_one_line(small):
    (X, y), _ = small
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=40,
                                      sampler=Drawn(["a"] * 400))
    with pytest.raises(ValueError, match=r"^train_data: the DataLoader's sampler \(Drawn\) does "
                                         "not draw sample indices"):
        fit_mlp(loader)


def test_a_validation_loader_keeps_last_batch_discard(small):
    (X, y), (Xv, yv) = small
    val = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(Xv[:70], yv[:70]), batch_size=32,
                                   last_batch="discard")
    net, h = fit_mlp((X, y), val_data=val, batch_size=32)
    first_64 = gluondist.evaluate(net, (Xv[:64], yv[:64]))
    assert h.history["val_loss"][-1] == pytest.approx(first_64["loss"], rel=1e-6)


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


def test_zero_sample_weights_exclude_those_samples_exactly(small):
    (X, y), _ = small
    weight = np.where(np.arange(len(X)) % 3 == 0, 0.0, 1.0).astype(np.float32)
    junk_a, junk_b = y.copy(), y.copy()
    junk_a[weight == 0], junk_b[weight == 0] = 0, 9  # whatever these labels are...
    a, ha = fit_mlp((X, junk_a, weight), val_data=(X, junk_a, weight))
    b, hb = fit_mlp((X, junk_b, weight), val_data=(X, junk_b, weight))
    assert_same_params(a, b)  # ...they change nothing
    keep = weight > 0
    figures = gluondist.evaluate(a, (X[keep], y[keep]))
    assert ha.history["val_loss"][-1] == pytest.approx(figures["loss"], rel=1e-6)
    assert ha.history["val_accuracy"][-1] == pytest.approx(figures["accuracy"], rel=1e-6)


def test_class_weight_is_a_weight_per_label(small):
    (X, y), _ = small
    by_class, hc = fit_mlp((X, y), class_weight={k: 2.0 if k == 3 else 1.0 for k in range(10)})
    by_sample, hs = fit_mlp((X, y, np.where(y == 3, 2.0, 1.0)))
    assert_same_params(by_class, by_sample)
    with pytest.raises(ValueError, match=r"class_weight covers classes 0..8 but train_data has "
                                         r"the label 9"):
        fit_mlp((X, y), class_weight={k: 1.0 for k in range(9)})


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
    X, y = three_classes()
    data = (X, y) if kind == "arrays" else mx.gluon.data.SimpleDataset(list(zip(X, y)))
    with pytest.raises(ValueError, match=message):
        gluondist.fit(_net3(), data, class_weight=weights)


def test_class_weight_needs_class_labels_and_leaves_validation_alone():
    X, y = three_classes()
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
    X, y = three_classes()
    with pytest.raises(ValueError, match="negative sample weights"):
        gluondist.fit(_net3(), mx.gluon.data.SimpleDataset(
            list(zip(X, y, -np.ones(len(X), dtype=np.float32)))))
    with pytest.raises(ValueError, match="every sample weighs 0"):
        gluondist.fit(_net3(), (X, y, np.zeros(len(X))))
    with pytest.raises(ValueError, match="every sample of its first batch weighs 0"):
        gluondist.fit(_net3(), mx.gluon.data.ArrayDataset(X, y, np.zeros(len(X), "f")))


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
    assert_same_params(net, ref, 1e-5)
    assert_same_history(h, href, rtol=1e-5)


# (11) one dtype rule: everything is fed as float32; other nets refused; predict's errors
def test_float16_arrays_and_datasets_are_cast_alike(small):
    X, y = small[0]
    ref, _ = fit_mlp((X.astype(np.float16).astype(np.float32), y))
    arrays, _ = fit_mlp((X.astype(np.float16), y))
    dataset, _ = fit_mlp(gdata.ArrayDataset(X.astype(np.float16), y))
    assert_same_params(arrays, ref)
    assert_same_params(dataset, ref)


def test_float64_datasets_are_cast_like_arrays(small):
    (X, y), _ = small
    X64, y64 = X.astype(np.float64), y.astype(np.float64)
    ref, _ = fit_mlp((X, y))
    for data in (mx.gluon.data.ArrayDataset(X64, y64),
                 mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X64, y64), batch_size=30),
                 mx.gluon.data.SimpleDataset(list(zip(X64, y64)))):
        net, _ = fit_mlp(data)
        assert_same_params(net, ref, 1e-6)


def test_integer_inputs_are_cast_to_float32(small):
    (X, y), _ = small
    ints = (X * 16).astype(np.int64)
    a, ha = fit_mlp((ints, y.astype(np.int32)))
    b, hb = fit_mlp(((X * 16).astype(np.float32), y))
    assert_same_params(a, b)
    ds = mx.gluon.data.ArrayDataset(mx.nd.array(ints, dtype="int32"), mx.nd.array(y))
    c, _ = fit_mlp(ds)
    assert_same_params(c, b, 1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_refused_naming_the_row(small, bad):
    (X, y), _ = small
    X = X.copy()
    X[17, 5] = bad
    with pytest.raises(ValueError, match=r"train_data\[0\] \(X\) holds NaN or infinity "
                                         r"\(first in row 17\)"):
        fit_mlp((X, y))
    dataset = mx.gluon.data.ArrayDataset(X, y)
    with pytest.raises(ValueError, match="row 17"):
        fit_mlp(dataset)
    with pytest.raises(ValueError, match=r"val_data\[1\] \(y\).*row 3"):
        fit_mlp(small[0], val_data=(small[1][0][:20], np.where(np.arange(20) == 3, bad, 1.0)))


@pytest.mark.parametrize("wrap", ["transform_first", "simple"])
def test_label_checks_hold_for_every_dataset(small, wrap):
    (X, y), _ = small
    y = y % 3
    y[:5] = 7  # in the first batch
    with pytest.raises(ValueError, match=r"labels from 0 to 7 \(in its first batch\).* 3 classes"):
        fit_mlp(_labels_dataset(X, y, wrap), net=_three_classes())
    loader = mx.gluon.data.DataLoader(_labels_dataset(X, y, wrap), batch_size=20)
    with pytest.raises(ValueError, match="labels from 0 to 7"):
        fit_mlp(loader, net=_three_classes())


def test_labels_of_the_wrong_shape_fail_before_training(small):
    (X, y), _ = small
    with pytest.raises(ValueError, match=r"labels of shape \(30, 2, 2\).*one class index"):
        fit_mlp((X, np.zeros((len(X), 2, 2))))


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


def test_a_two_input_net_never_silently_loses_an_input(small):
    X, y = small[0]
    net = TwoInputs()
    gluondist.fit(net, ((X, X * 2), y), epochs=1)
    with pytest.raises(ValueError, match=r"reads each sample of 2 arrays as \(inputs, labels\) .*"
                                         "but the net takes 2 inputs"):
        gluondist.predict(net, gdata.ArrayDataset(X, X * 2))
    both = gluondist.predict(net, (X, X * 2))
    assert both.shape == (len(X), 10)
