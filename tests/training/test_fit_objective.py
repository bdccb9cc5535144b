"""Losses and metrics: what fit computes for them (exact means, one-hot, sequences,
composites, several devices) and the losses and metrics it refuses."""
import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import EarlyStopping

from conftest import curves, fit_mlp, mlp
from fits import TwoByTwo, two_by_two


# (5) one loss value per sample
class MeanLoss(mx.gluon.loss.Loss):
    def __init__(self, reduce):
        super().__init__(None, 0)
        self.inner, self.reduce = mx.gluon.loss.SoftmaxCrossEntropyLoss(), reduce

    def hybrid_forward(self, F, pred, label):
        return getattr(self.inner(pred, label), self.reduce)()


class ElementLoss(mx.gluon.loss.Loss):
    """A value per sample and output unit, not averaged over the units."""

    def __init__(self):
        super().__init__(None, 0)

    def hybrid_forward(self, F, pred, label):
        return F.square(pred - F.one_hot(label, 10))


def _regression(n=331):
    rs = np.random.RandomState(0)
    X = rs.rand(600 + n, 8).astype(np.float32)
    y = (X @ rs.rand(8) + 0.1 * rs.randn(600 + n)).astype(np.float32)
    return (X[:600], y[:600]), (X[600:], y[600:])


def _regressor():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(1))
    return net


def test_outputs_and_losses_that_do_not_match_fail_before_training():
    X, y = two_by_two()
    with pytest.raises(ValueError, match="2 output\\(s\\) but loss= gives 3"):
        gluondist.fit(TwoByTwo(), (X, y), loss=[mx.gluon.loss.L2Loss()] * 3)
    with pytest.raises(ValueError, match="returns 2 output\\(s\\) and train_data has 1 label"):
        gluondist.fit(TwoByTwo(), (X, y[0]))


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_a_loss_that_reduces_the_batch_is_refused(small, reduce):
    with pytest.raises(ValueError, match=r"gives shape \(1,\) for a batch of 30 samples of "
                                         "train_data: fit needs one loss value per sample"):
        fit_mlp(small[0], loss=MeanLoss(reduce))


def test_a_loss_with_a_value_per_unit_is_refused(small):
    with pytest.raises(ValueError, match=r"gives shape \(30, 10\) for a batch of 30 samples "
                                         r"of train_data: fit needs one loss value per sample, "
                                         r"shape \(30,\)"):
        fit_mlp(small[0], loss=ElementLoss())


def test_metrics_auto_is_accuracy_for_classifiers_only():
    X, y = two_by_two()
    h = gluondist.fit(TwoByTwo(), (X, y), loss=[mx.gluon.loss.SoftmaxCrossEntropyLoss(),
                                                mx.gluon.loss.L2Loss()], epochs=1)
    assert set(curves(h.history)) == {"loss", "out0_loss", "out1_loss", "out0_accuracy"}
    h = gluondist.fit(mx.gluon.nn.Dense(1), (X[0], y[1]), loss=mx.gluon.loss.L2Loss(), epochs=1)
    assert set(curves(h.history)) == {"loss"}


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
    _, one = fit_mlp(small[0], ctx=1, net=probabilities(), **kw)
    _, two = fit_mlp(small[0], ctx=2, net=probabilities(), **kw)
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

    net, h = fit_mlp(small[0], epochs=1, val_data=small[1],
                     metrics=[mx.metric.create(["acc", "ce"]), MeanPred()])
    assert {"val_accuracy", "val_cross-entropy", "val_mean_pred"} <= set(h.history)
    expected = net(mx.nd.array(small[1][0])).mean().asscalar()
    assert h.history["val_mean_pred"][0] == pytest.approx(expected, rel=1e-5)


def test_a_metric_that_cannot_update_fails_before_training_with_its_cause(small):
    class Broken(mx.metric.EvalMetric):
        def __init__(self):
            super().__init__("broken")

        def update(self, labels, preds):
            raise KeyError("no such column")

    with pytest.raises(ValueError, match="metric 'broken' cannot be computed on a batch of "
                                         "train_data: 'no such column'") as info:
        fit_mlp(small[0], metrics=[Broken()])
    assert isinstance(info.value.__cause__, KeyError)


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


def test_metric_names_and_hints(small):
    _, h = fit_mlp(small[0], epochs=1, val_data=small[1],
                   metrics=[mx.metric.Accuracy(name="myacc")],
                   callbacks=[EarlyStopping("val_myacc")])
    assert "val_myacc" in h.history
    with pytest.raises(ValueError, match="monitors 'val_acc' but the run records") as info:
        fit_mlp(small[0], val_data=small[1], callbacks=[EarlyStopping("val_acc")])
    assert "pass val_data" not in str(info.value)
    with pytest.raises(ValueError, match=r"unknown metric 'top_k_accuracy' \(Please use "
                                         r"Accuracy if top_k is no more than 1\)"):
        fit_mlp(small[0], metrics=["top_k_accuracy"])
    with pytest.raises(ValueError, match="optimizer_params for 'sgd'"):
        fit_mlp(small[0], optimizer_params={"learning_rate": "fast"})


def test_class_metrics_take_the_classes_on_the_losss_axis():
    # outputs (B, 3, 3) with labels (B, 3): the shapes alone cannot tell axis 1 from axis 2
    class Square(mx.gluon.HybridBlock):
        def __init__(self, axis):
            super().__init__()
            self.axis, self.dense = axis, mx.gluon.nn.Dense(9)

        def hybrid_forward(self, F, x):  # probabilities, for ce
            return F.softmax(self.dense(x).reshape((0, 3, 3)), axis=self.axis)

    rs = np.random.RandomState(0)
    X, y = rs.rand(64, 5).astype(np.float32), rs.randint(0, 3, (64, 3)).astype(np.float32)
    for axis in (1, 2):
        net = Square(axis)
        net.initialize(mx.init.Normal(1.0))
        out = net(mx.nd.array(X)).asnumpy()
        figures = gluondist.evaluate(net, (X, y), batch_size=16,
                                     loss=mx.gluon.loss.SoftmaxCrossEntropyLoss(axis=axis),
                                     metrics=["accuracy", "ce", mx.metric.TopKAccuracy(2)])
        prob = np.moveaxis(out, axis, -1)  # (B, 3 positions, 3 classes)
        picked = np.take_along_axis(prob, y.astype(int)[..., None], -1)[..., 0]
        in_top2 = (np.argsort(-prob, -1)[..., :2] == y.astype(int)[..., None]).any(-1)
        assert figures["accuracy"] == pytest.approx((prob.argmax(-1) == y).mean())
        assert figures["cross-entropy"] == pytest.approx(-np.log(picked).mean(), rel=1e-5)
        assert figures["top_k_accuracy_2"] == pytest.approx(in_top2.mean())
