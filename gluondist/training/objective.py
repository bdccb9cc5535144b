"""What fit minimises and reports: one loss per output (weighted), sample weights, the metrics
of each output, their exact sums over an epoch, and the checks run on a first batch."""
from __future__ import annotations

import inspect
from typing import Dict, List, Optional

import numpy as np

from . import metrics as mtr
from .checks import last_line
from .. import _mx
from .._mx import mx


class Objective:
    """Called by :func:`gluondist.parallel.forward_backward` as ``loss_fn(out, target)`` with
    ``target = (labels, weight)``: the per-sample training loss (for several outputs, the
    ``loss_weights``-weighted sum, with the per-output losses beside it). Sample weights
    multiply each sample's loss; the optimizer step still divides by the number of samples, as
    in Keras."""

    def __init__(self, loss, loss_weights, metrics, outputs: int):
        self.outputs, self.several = outputs, outputs > 1
        losses = list(loss) if isinstance(loss, (list, tuple)) else [loss] * outputs
        if len(losses) != outputs:
            raise ValueError(f"the net has {outputs} output(s) but loss= gives {len(losses)} "
                             "loss(es); give one per output, or one for all")
        self.losses = [fn or mx.gluon.loss.SoftmaxCrossEntropyLoss() for fn in losses]
        try:
            weights = [1.0] * outputs if loss_weights is None else \
                [float(w) for w in loss_weights]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"loss_weights must be {outputs} number(s), one per output, not "
                             f"{loss_weights!r}") from exc
        if len(weights) != outputs:
            raise ValueError(f"loss_weights has {len(weights)} number(s) for {outputs} "
                             "output(s); give one per output")
        self.loss_weights = weights
        if metrics == "auto":  # accuracy where the loss says the output is a classifier
            metrics = {i: "accuracy" for i, fn in enumerate(self.losses)
                       if isinstance(fn, mx.gluon.loss.SoftmaxCrossEntropyLoss)}
        self.metrics = _per_output(metrics, outputs)
        for i, ms in enumerate(self.metrics):
            for m in ms:
                m.name = f"out{i}_{m.name}" if self.several else m.name
                m.loss_axis = mtr.loss_axis(self.losses[i])
        names = [m.name for ms in self.metrics for m in ms]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"metric(s) {', '.join(repeated)} given twice; pass each once")

    def __call__(self, out, target):
        labels, weight = target
        outs = outputs_of(out)
        per = [fn(o, y) for fn, o, y in zip(self.losses, outs, labels)]
        if weight is not None:
            per = [mx.nd.broadcast_mul(p, weight.reshape((-1,) + (1,) * (p.ndim - 1)))
                   for p in per]
        if not self.several:
            return per[0]
        return mx.nd.add_n(*[p * w for p, w in zip(per, self.loss_weights)]), per

    def keys(self) -> List[str]:
        """The History's keys for one pass (without ``val_``)."""
        per = [f"out{i}_loss" for i in range(self.outputs)] if self.several else []
        return ["loss", *per, *(m.name for ms in self.metrics for m in ms)]


def _per_output(metrics, outputs: int) -> List[List[mtr.Metric]]:
    """``metrics`` for each output: a dict {output: metrics}, or the same for every output."""
    if isinstance(metrics, dict):
        bad = [k for k in metrics if not isinstance(k, int) or not 0 <= k < outputs]
        if bad:
            raise ValueError(f"metrics keys must be output indices 0..{outputs - 1}, not {bad}")
        return [mtr.create(metrics.get(i)) for i in range(outputs)]
    return [mtr.create(metrics) for _ in range(outputs)]


class Tally:
    """One pass's exact sums: the loss (weighted total and per output), the sample count (or
    weight sum) and the metrics, on the devices until :meth:`logs` reads them."""

    def __init__(self, objective: Objective, carried: Optional[List[float]] = None):
        self.objective = objective
        self.carried = carried  # the sums of the pass before its last step checkpoint
        self.reset()

    def reset(self) -> None:
        self.loss, self.weight = mtr.DeviceSums(), mtr.DeviceSums()
        self.per = [mtr.DeviceSums() for _ in range(self.objective.outputs)]
        self.count = 0
        for ms in self.objective.metrics:
            for m in ms:
                m.reset()

    def add(self, outputs, targets, losses) -> list:
        """Add one batch (lists over contexts, None where a context had no samples); returns
        the batch's ``(context, loss sum)`` pairs."""
        batch = self.add_losses(outputs, targets, losses)
        self.add_metrics(outputs, targets)
        return batch

    def add_losses(self, outputs, targets, losses) -> list:
        """:meth:`add`'s loss sums alone (device operations, no host sync)."""
        batch = []
        for i, (out, target, loss) in enumerate(zip(outputs, targets, losses)):
            if out is None:
                continue
            total, per = loss if isinstance(loss, tuple) else (loss, None)
            batch.append((i, total.sum()))
            self.loss.add(i, batch[-1][1])
            for j, p in enumerate(per or ()):
                self.per[j].add(i, p.sum())
            weight = target[1]
            if weight is None:
                self.count += total.shape[0]
            else:
                self.weight.add(i, weight.sum())
        return batch

    def add_metrics(self, outputs, targets) -> None:
        """:meth:`add`'s metrics alone (one of a user's may read values on the host)."""
        for j, ms in enumerate(self.objective.metrics):
            outs = [None if o is None else outputs_of(o)[j] for o in outputs]
            labels = [None if t is None else t[0][j] for t in targets]
            weights = [None if t is None else t[1] for t in targets]
            for m in ms:
                m.update(labels, outs, weights)

    def _sums(self):
        count = self.count + self.weight.total()
        pairs = {"loss": (self.loss.total(), count)}
        if self.objective.several:
            pairs.update({f"out{j}_loss": (s.total(), count) for j, s in enumerate(self.per)})
        return pairs, [m for ms in self.objective.metrics for m in ms]

    def logs(self, allreduce=None) -> Dict[str, float]:
        return mtr.reduce(*self._sums(), allreduce, self.carried)

    def carry(self, allreduce=None) -> List[float]:
        """At a step checkpoint: fold the sums so far (over all workers with ``allreduce``)
        into ``carried`` and start the device sums again; returns ``carried``, which the
        checkpoint keeps and a resumed pass starts from. An uninterrupted pass does the same,
        so both add the same numbers in the same order."""
        values = mtr.flat(*self._sums())
        if allreduce is not None:
            values = [float(v) for v in allreduce(values)]
        if self.carried is not None:
            values = [a + b for a, b in zip(values, self.carried)]
        self.carried = values
        self.reset()
        return values


def check_float32(net) -> None:
    """fit, evaluate and predict cast every input, label and weight to float32: refuse, in one
    line, a net whose parameters are of another type (``net.cast('float64')``)."""
    other = [p for p in net.collect_params().values() if np.dtype(p.dtype).name != "float32"]
    if other:
        raise ValueError(f"parameter {other[0].name} is {np.dtype(other[0].dtype).name}"
                         f"{f' (and {len(other) - 1} more)' if len(other) > 1 else ''}, but "
                         "gluondist casts every input, label and weight to float32 and trains "
                         "float32 nets only: cast the net with net.cast('float32')")


def named_inputs(net) -> int:
    """How many inputs ``net``'s forward names (``*args`` aside, and the parameters that MXNet
    passes to ``hybrid_forward`` by name)."""
    block = mx.gluon.HybridBlock
    hybrid = isinstance(net, block) and type(net).hybrid_forward is not block.hybrid_forward
    try:
        params = list(inspect.signature(net.hybrid_forward if hybrid else net.forward)
                      .parameters.values())[1 if hybrid else 0:]  # hybrid_forward's F
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    own = _mx.own_parameter_names(net)
    return sum(1 for p in params if p.kind in kinds and p.name not in own)


def shapes_of(data) -> str:
    """The shapes of one part's inputs for a message, cut short for many (a list of rows)."""
    if not isinstance(data, tuple):
        return str(data.shape)
    shapes = [x.shape for x in data]
    return f"{shapes[:3]} ... ({len(data)} inputs)" if len(data) > 3 else str(shapes)


def outputs_of(out) -> tuple:
    """A net's outputs as a tuple: one NDArray, or a tuple or list of them (even of one)."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def forward(net, data):
    """``net`` on one context's inputs (a tuple for several inputs)."""
    return net(*data) if isinstance(data, tuple) else net(data)


def check_batch(net, objective: Optional[Objective], src, name: str, ctx, batch_size: int,
                loss=None, loss_weights=None, metrics=None, class_weight=None) -> Objective:
    """Run the net, the loss and the metrics on the first batch of ``src``: wrong shapes,
    labels out of range and metrics that cannot handle the data fail now, each with its own
    reason. Builds the Objective (from ``loss``, ``loss_weights``, ``metrics``) when None."""
    # two samples at least: a loss that averages the batch shows only on more than one
    data_parts, target_parts = src.load(np.arange(min(len(src), max(batch_size, 2))), [ctx])
    data, (labels, weight) = data_parts[0], target_parts[0]
    shapes = shapes_of(data)
    try:
        out = forward(net, data)
        for o in (out if isinstance(out, (tuple, list)) else [out]):
            o.wait_to_read()  # MXNet reports errors when a result is read
    except Exception as exc:
        raise ValueError(f"net cannot take a batch of {name} (shape {shapes}): "
                         f"{last_line(exc)}") from exc
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if objective is None:
        objective = Objective(loss, loss_weights, metrics, len(outs))
    if len(outs) != objective.outputs or len(labels) != len(outs):
        raise ValueError(f"the net returns {len(outs)} output(s) and {name} has {len(labels)} "
                         "label array(s); give one label array per output")
    for j, (fn, o, y) in enumerate(zip(objective.losses, outs, labels)):
        arrays = src.label_arrays[j] if src.label_arrays is not None else None
        where = f"{name} (output {j})" if objective.several else name
        _check_labels(fn, o, y, arrays, where)
    if class_weight is not None:
        _check_class_weight(objective, outs[0], labels[0], class_weight)
    if weight is not None and not (weight >= 0).min().asscalar():
        raise ValueError(f"{name} has negative sample weights (in its first batch); weights "
                         "must be non-negative")
    if weight is not None and not weight.sum().asscalar() > 0:
        raise ValueError(f"{name}: every sample of its first batch weighs 0, so its loss is "
                         "0/0; give weights that are not all 0")
    try:
        result = objective(out, (labels, weight))
        (result[0] if isinstance(result, tuple) else result).wait_to_read()
    except Exception as exc:
        raise ValueError(f"loss cannot be computed on a batch of {name} (outputs of shape "
                         f"{[o.shape for o in outs]}, labels {[y.shape for y in labels]}): "
                         f"{last_line(exc)}") from exc
    _check_per_sample(objective, outs, labels, name)
    for j, ms in enumerate(objective.metrics):
        mtr.check(ms, [labels[j]], [outs[j]], f"a batch of {name}")
    return objective


def _check_per_sample(objective: Objective, outs, labels, name: str) -> None:
    """fit weighs, sums and averages the losses itself: each must give one value per sample."""
    for j, (fn, o, y) in enumerate(zip(objective.losses, outs, labels)):
        value = fn(o, y)
        if value.shape != (o.shape[0],):
            where = f" (output {j})" if objective.several else ""
            raise ValueError(f"the loss{where} gives shape {value.shape} for a batch of "
                             f"{o.shape[0]} samples of {name}: fit needs one loss value per "
                             f"sample, shape ({o.shape[0]},), as gluon's losses give; return "
                             "the per-sample losses (averaged over any other axes), not their "
                             "mean or sum over the batch")


def _class_axis(loss, out) -> Optional[int]:
    """The axis of ``out`` that holds the classes when ``loss`` is softmax cross-entropy with
    class-index (sparse) labels; None for any other loss."""
    axis = mtr.loss_axis(loss)
    if axis is None or not _mx.sparse_label(loss):
        return None
    return axis % out.ndim


def _check_class_weight(objective: Objective, out, label, class_weight) -> None:
    axis = _class_axis(objective.losses[0], out)
    if axis is None:
        raise ValueError("class_weight needs class-index labels for the first output (softmax "
                         "cross-entropy with sparse labels); give sample weights instead")
    classes = out.shape[axis]
    if len(class_weight) != classes:
        raise ValueError(f"class_weight has {len(class_weight)} classes but the net outputs "
                         f"{classes}; give a weight for each class 0..{classes - 1}")


def _check_labels(loss, out, label, all_labels, name) -> None:
    """Sparse softmax cross-entropy needs one integer class 0..C-1 per sample: the loss would
    otherwise clip bad labels and train on without a word."""
    axis = _class_axis(loss, out)
    if axis is None:
        return
    classes = out.shape[axis]
    if label.size != out.size // classes:
        raise ValueError(f"{name} has labels of shape {label.shape} for outputs of shape "
                         f"{out.shape}: softmax cross-entropy takes one class index per sample "
                         f"(labels of shape {out.shape[:axis] + out.shape[axis + 1:]}); for "
                         "one-hot labels use SoftmaxCrossEntropyLoss(sparse_label=False)")
    labels = np.asarray(all_labels) if all_labels is not None else label.asnumpy()
    low, high = labels.min(), labels.max()
    if low < 0 or high >= classes or not np.all(np.equal(np.mod(labels, 1), 0)):
        checked = "" if all_labels is not None else " (in its first batch)"
        raise ValueError(f"{name} has labels from {low:g} to {high:g}{checked} but the net "
                         f"outputs {classes} classes (labels must be integers 0..{classes - 1})")

