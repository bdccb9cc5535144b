"""Helpers that several of fit's test files share (conftest.py has the ones every test uses)."""
import mxnet as mx
import numpy as np

from gluondist import Callback
from conftest import OPT, fit_mlp


def fit_on(ctx, data, **kw):
    """``fit_mlp`` on the devices ``ctx``, its ``optimizer_params`` added to the tests' defaults
    (not in their place)."""
    kw["optimizer_params"] = dict(OPT, **kw.pop("optimizer_params", {}))
    return fit_mlp(data, ctx=ctx, **kw)


def two_by_two(n=300, seed=0):
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


def three_classes(n=90):
    rs = np.random.RandomState(0)
    return rs.rand(n, 6).astype(np.float32), rs.randint(0, 3, n).astype(np.float32)


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


class Feed(Callback):
    """Replaces the logs' values so that EarlyStopping sees a scripted series."""

    def __init__(self, key, values):
        self.key, self.values = key, values

    def on_epoch_end(self, run, epoch, logs):
        logs[self.key] = self.values[epoch]
