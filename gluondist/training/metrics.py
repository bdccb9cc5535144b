"""Metrics for :func:`gluondist.fit`: each value is the mean over every sample of every worker.

MXNet's own ``mse``, ``mae``, ``rmse`` and ``ce`` metrics average per-batch means (a short last
batch weighs as much as a full one) and read every batch back to the host. Here each metric
keeps a running sum and a sample count per device, on the device; fit reads them once per epoch
and sums them over workers, so one device, several devices and several workers give the same
figure. With sample weights each value is the weighted mean (sum of w*m over sum of w). A user's
own ``mx.metric.EvalMetric`` is combined as the sample-count-weighted mean of its per-batch
values (sample weights are not applied to it): exact for metrics that are means over samples
(all of MXNet's above), an approximation for ones that are not (F1, MCC, Pearson correlation).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from .. import _mx
from .._mx import mx
from .checks import last_line


class DeviceSums:
    """Running sums kept on each context, keyed by context position (no host sync per add)."""

    def __init__(self):
        self.sums: Dict[int, "mx.nd.NDArray"] = {}

    def add(self, i: int, value) -> None:
        # A new array each time, never +=: ``value`` may still be read on its own (fit checks
        # each batch's loss one batch later).
        self.sums[i] = self.sums[i] + value if i in self.sums else value

    def total(self) -> float:
        return float(sum(s.asscalar() for s in self.sums.values()))


class Metric:
    """A per-sample mean. ``update(labels, preds, weights)`` takes one label, one prediction and
    one weight array (or None) per context (None where a context had no samples); ``sums()``
    returns ``(sum, count)`` (weighted: ``(sum of w*m, sum of w)``); ``value(sum, count)`` turns
    the (worker-summed) pair into the reported figure. ``loss_axis``: the axis the training
    loss takes the classes on, where it says (see :func:`class_axis`)."""
    name = "metric"
    loss_axis: Optional[int] = None

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self._sums, self._weights, self._count = DeviceSums(), DeviceSums(), 0

    def per_sample(self, label, pred):
        """This part's per-sample values, an NDArray of shape (n,) or (n, ...)."""
        raise NotImplementedError

    def classes_last(self, pred):
        """``pred`` with the loss's class axis last, where the loss takes them elsewhere."""
        if self.loss_axis is None or self.loss_axis % pred.ndim == pred.ndim - 1:
            return pred
        return mx.nd.moveaxis(pred, self.loss_axis % pred.ndim, -1)

    def update(self, labels: Sequence, preds: Sequence, weights: Sequence = ()) -> None:
        for i, (label, pred) in enumerate(zip(labels, preds)):
            if pred is None:
                continue
            values = self.per_sample(label, pred)
            if values.ndim > 1:  # a sequence output: the mean over a sample's positions
                values = values.reshape((values.shape[0], -1)).mean(axis=1)
            weight = weights[i] if i < len(weights) else None
            if weight is None:
                self._sums.add(i, values.sum())
                self._count += pred.shape[0]
            else:
                weight = weight.reshape((-1,))
                self._sums.add(i, (values * weight).sum())
                self._weights.add(i, weight.sum())

    def sums(self) -> Tuple[float, float]:
        return self._sums.total(), self._count + self._weights.total()

    def value(self, total: float, count: float) -> float:
        return total / count if count else float("nan")


def _like(label, pred):
    """``label`` in ``pred``'s shape where they hold as many values ((n,) against (n, 1))."""
    return label.reshape(pred.shape) if label.shape != pred.shape and label.size == pred.size \
        else label


def loss_axis(loss) -> Optional[int]:
    """The axis ``loss`` takes the classes on: softmax cross-entropy's ``axis``; None for other
    losses (the one rule fit's label checks and its metrics both follow)."""
    if isinstance(loss, mx.gluon.loss.SoftmaxCrossEntropyLoss):
        return _mx.loss_axis(loss)
    return None


def class_axis(label, pred, known: Optional[int] = None) -> int:
    """The axis of ``pred`` that holds the classes: ``known`` (the loss's, see
    :func:`loss_axis`) where given; else the last, or axis 1 when the labels have ``pred``'s
    shape without axis 1 (as for ``SoftmaxCrossEntropyLoss(axis=1)``)."""
    if known is not None:
        return known % pred.ndim
    if label.shape != pred.shape[:-1] and pred.ndim > 2 and \
            label.shape == pred.shape[:1] + pred.shape[2:]:
        return 1
    return pred.ndim - 1


class Accuracy(Metric):
    """The share of samples whose largest output is the label's class: a class index, or, for
    labels of the outputs' shape (one-hot or class probabilities, as
    ``SoftmaxCrossEntropyLoss(sparse_label=False)`` takes), the label's largest entry."""
    name = "accuracy"

    def per_sample(self, label, pred):
        axis = class_axis(label, pred, self.loss_axis)
        if pred.shape[axis] == 1:  # MXNet's accuracy would report the share of class 0
            raise ValueError("accuracy needs one output per class, but the net has one output "
                             "unit (a sigmoid or a regression): give the net two outputs "
                             "(softmax), or use another metric")
        if label.shape == pred.shape:
            return pred.argmax(axis=axis) == label.argmax(axis=axis)
        if label.ndim != pred.ndim - 1:
            label = label.reshape(pred.shape[:axis] + pred.shape[axis + 1:])
        return pred.argmax(axis=axis) == label.astype(pred.dtype, copy=False)


class TopKAccuracy(Metric):
    def __init__(self, k: int):
        self.k, self.name = k, f"top_k_accuracy_{k}"
        super().__init__()

    def per_sample(self, label, pred):
        top = mx.nd.topk(self.classes_last(pred), axis=-1, k=self.k, ret_typ="indices")
        label = label.reshape(top.shape[:-1] + (1,)).astype(top.dtype, copy=False)
        return mx.nd.broadcast_equal(top, label).sum(axis=-1)


class _Elementwise(Metric):
    """Mean over a sample's elements, then over samples (as MXNet's, but per sample)."""

    def per_sample(self, label, pred):
        error = self.error(_like(label, pred).astype(pred.dtype, copy=False), pred)
        return error.reshape((pred.shape[0], -1)).mean(axis=1)


class MSE(_Elementwise):
    name = "mse"

    @staticmethod
    def error(label, pred):
        return (label - pred) ** 2


class MAE(_Elementwise):
    name = "mae"

    @staticmethod
    def error(label, pred):
        return (label - pred).abs()


class RMSE(MSE):
    """The root of the mean squared error over all samples (not a mean of per-batch roots)."""
    name = "rmse"

    def value(self, total, count):
        return math.sqrt(total / count) if count else float("nan")


class CrossEntropy(Metric):
    """MXNet's ``ce``: ``-log p[label]`` where the net outputs probabilities (not logits)."""
    name = "cross-entropy"

    def __init__(self, eps: float = 1e-12):
        self.eps = eps
        super().__init__()

    def per_sample(self, label, pred):
        pred = self.classes_last(pred)
        prob = mx.nd.pick(pred, label.reshape(pred.shape[:-1]), axis=-1)
        return -(prob + self.eps).log()


class Custom(Metric):
    """A user's ``mx.metric.EvalMetric``, weighted by each part's sample count."""

    def __init__(self, metric):
        self.metric, self.name = metric, metric.name
        super().__init__()

    def reset(self):
        self._total, self._count = 0.0, 0

    def update(self, labels, preds, weights=()):
        for label, pred in zip(labels, preds):  # weights: see the module's docstring
            if pred is None:
                continue
            self.metric.reset()
            self.metric.update([label], [pred])
            value = self.metric.get()[1]
            n = pred.shape[0]
            self._total += float(value) * n
            self._count += n

    def sums(self):
        return self._total, self._count


_BUILTIN = {
    mx.metric.Accuracy: lambda m: Accuracy(),
    mx.metric.TopKAccuracy: lambda m: TopKAccuracy(m.top_k),
    mx.metric.RMSE: lambda m: RMSE(),
    mx.metric.MSE: lambda m: MSE(),
    mx.metric.MAE: lambda m: MAE(),
    mx.metric.CrossEntropy: lambda m: CrossEntropy(m.eps),
}
SUPPORTED = "accuracy (acc), mse, mae, rmse, ce, mx.metric.TopKAccuracy(k)"


def create(metrics) -> List[Metric]:
    """Our metrics for what a user passes as ``metrics``: None, a name, an EvalMetric, or a list
    of them (a CompositeEvalMetric is taken apart). Raises ValueError naming an unknown one."""
    if metrics is None:
        return []
    if isinstance(metrics, (str, mx.metric.EvalMetric)):
        metrics = [metrics]
    if not isinstance(metrics, (list, tuple)):
        raise ValueError(f"metrics must be a name, an mx.metric.EvalMetric or a list of them, "
                         f"not {metrics!r}")
    out: List[Metric] = []
    for m in metrics:
        if isinstance(m, str):
            try:
                m = mx.metric.create(m)
            except Exception as exc:
                raise ValueError(f"unknown metric {m!r} ({last_line(exc)}); use one of "
                                 f"{SUPPORTED}, or an mx.metric.EvalMetric") from exc
        if isinstance(m, mx.metric.CompositeEvalMetric):
            out.extend(create(list(m.metrics)))
        elif type(m) in _BUILTIN:
            ours = _BUILTIN[type(m)](m)
            ours.name = m.name  # MXNet's default names are ours; a user's own name is kept
            out.append(ours)
        elif isinstance(m, mx.metric.EvalMetric):
            out.append(Custom(m))
        else:
            raise ValueError(f"metric {m!r} is neither a name nor an mx.metric.EvalMetric")
    names = [m.name for m in out]
    repeated = sorted({n for n in names if names.count(n) > 1 or n == "loss"})
    if repeated:
        raise ValueError(f"metric name(s) {', '.join(repeated)} appear twice (the loss is "
                         "always reported as 'loss'); pass each metric once")
    return out


def check(metric_list: List[Metric], labels, preds, source: str) -> None:
    """Update each metric on one batch and reset it: a metric that cannot handle this data
    fails now, with its own reason, instead of after an epoch of training."""
    for m in metric_list:
        try:
            m.update(labels, preds)
            m.sums()
        except Exception as exc:
            raise ValueError(f"metric {m.name!r} cannot be computed on {source}: "
                             f"{last_line(exc)}") from exc
        finally:
            m.reset()


def flat(pairs: Dict[str, Tuple[float, float]], metric_list: List[Metric]) -> List[float]:
    """The sums and counts of :func:`reduce`, in its order, as one list."""
    return [float(x) for _, pair in _named(pairs, metric_list) for x in pair]


def _named(pairs, metric_list):
    return list(pairs.items()) + [(m.name, m.sums()) for m in metric_list]


def reduce(pairs: Dict[str, Tuple[float, float]], metric_list: List[Metric],
           allreduce=None, carried: Optional[Sequence[float]] = None) -> Dict[str, float]:
    """``{name: value}`` from per-process ``(sum, count)`` pairs (the loss first) and the
    metrics, summed over workers by ``allreduce`` (a function on a list of floats) if given,
    plus ``carried``: the sums of an earlier part of the pass (see :func:`flat`)."""
    named = _named(pairs, metric_list)
    values = flat(pairs, metric_list)
    if allreduce is not None:
        values = list(allreduce(values))
    if carried is not None:
        values = [a + b for a, b in zip(values, carried)]
    flat_values = values
    value = {m.name: m.value for m in metric_list}
    out: Dict[str, float] = {}
    for i, (name, _) in enumerate(named):
        total, count = flat_values[2 * i], flat_values[2 * i + 1]
        out[name] = value[name](total, count) if name in value else \
            (total / count if count else float("nan"))
    return out
