"""BatchNorm whose batch statistics span every device of every worker of the job
(:func:`sync_batchnorm`), so that N workers with batch b compute what one process computes with
batch N*b, BatchNorm included.

How the reduction is done. A converted layer computes its batch statistics with MXNet's own
operators, in two passes as MXNet's BatchNorm does (the mean, then the mean of the squared
deviations), and sums each pass's per-channel sums over the job in a custom operator
(:class:`_Sum`): the forward sums the devices' and workers' values, the backward sums their
gradients, which is the sum's adjoint. Everything else, the normalisation and its gradient, is
ordinary operators, so autograd differentiates the global batch's BatchNorm, and the net may be
hybridized. Only the per-channel vectors cross the custom operator. MXNet 1.9.1 hands a custom
operator an activation in oneDNN's blocked layout as if it were in the default one, and its
values come out wrong, so whole activations never cross it.

MXNet runs a custom operator on threads of its own, beside the thread that steps the trainer.
The devices of a process meet in :class:`_Layer` (the last to arrive sums them, in device order,
and sends the sum), and the sum travels on keys of the layer's own through the job's kvstore,
under :data:`gluondist.kv.node.KV_LOCK`, which every push and pull of the distributed kvstore
holds while it is issued: MXNet's distributed kvstore keeps its buffers in maps it does not lock
(src/kvstore/kvstore_dist.h), and the trainer's pushes are issued while the backward pass, and
so these sums, still run. The lock is held only to issue; the wait for a sum is outside it.

The running statistics are updated in the backward pass, as MXNet's BatchNorm does, with the
global batch's mean and biased variance."""
from __future__ import annotations

import threading
from typing import Dict, List, Optional

import numpy as np

from . import _mx
from ._mx import mx
from .kv.node import KV_LOCK, NODE, is_distributed, quiet, resolve_mode

_OP = "gluondist_sync_batchnorm"
WAIT = 600.0  # seconds a device waits for the other devices of its process at a layer


class _Layer:
    """One converted layer's meeting point: how many ``devices`` run it in this process and,
    in a job, its kvstore keys (one per sum: ``mean``, ``var`` forward, ``dmean``, ``dvar``
    backward).

    Several devices (kept for GPUs; on CPUs sync_batchnorm refuses them, see docs/models.md)
    are not told apart: MXNet gives a custom operator on ``cpu(1)`` arrays that say
    ``cpu(0)``. None is needed either: a device's next call for the same sum comes only after
    this round's (its forward waits for the backward, which waits for the sum), and the
    float64 sum of a few float32 figures does not depend on their order."""

    def __init__(self, name: str, devices: int, kv=None, keys: Optional[Dict] = None,
                 original=None):
        self.name, self.devices, self.kv, self.keys = name, devices, kv, keys
        self.original = original  # the BatchNorm it was (plain_batchnorm puts it back)
        self._cond = threading.Condition()
        self._open: Dict[str, list] = {}  # the round each sum is gathering: [values, number]
        self._done: Dict[tuple, list] = {}  # (sum, number): [total, devices yet to take it]

    def sum(self, what: str, value: np.ndarray) -> np.ndarray:
        """``value`` (float64) summed over every device and worker: each device of this
        process calls, for the same ``what``, once a round."""
        if self.devices == 1:
            return self._over_workers(what, value)
        with self._cond:
            values, number = self._open.setdefault(what, [[], self._number(what)])
            values.append(value)
            last = len(values) == self.devices
            if last:  # the last to arrive sends for all
                del self._open[what]
        if last:
            total = self._over_workers(what, np.sum(values, axis=0))
            with self._cond:
                self._done[(what, number)] = [total, self.devices - 1]
                self._cond.notify_all()
            return total
        with self._cond:
            if not self._cond.wait_for(lambda: (what, number) in self._done, WAIT):
                raise RuntimeError(
                    f"sync_batchnorm: layer {self.name}: only {len(values)} of its "
                    f"{self.devices} devices ran it within {WAIT:.0f}s; every training pass "
                    "must run on all the devices the parameters live on (split each batch "
                    "over all of them)")
            kept = self._done[(what, number)]
            kept[1] -= 1
            if kept[1] == 0:
                del self._done[(what, number)]
            return kept[0]

    def _number(self, what: str) -> int:
        self._count = getattr(self, "_count", {})
        self._count[what] = self._count.get(what, -1) + 1
        return self._count[what]

    def _over_workers(self, what: str, value: np.ndarray) -> np.ndarray:
        if self.kv is None:
            return value
        array = mx.nd.array(value, dtype="float64")
        with KV_LOCK:
            self.kv.pushpull(self.keys[what], array, out=array)
        return array.asnumpy()


_LAYERS: List[_Layer] = []


class _Sum(mx.operator.CustomOp):
    """The job's sum of a per-channel vector (``mean``: the sums, then the count; ``var``: the
    squared deviations), turned into the global batch's mean or variance; in predict mode the
    running statistics instead. The backward sums the gradients (divided by the count)."""

    def __init__(self, layer: _Layer, phase: str, momentum: float):
        self.layer, self.phase, self.momentum = layer, phase, momentum

    def forward(self, is_train, req, in_data, out_data, aux):
        shape = out_data[0].shape
        if not is_train:
            running = aux[0] if self.phase == "mean" else aux[1]
            self.assign(out_data[0], req[0], running.reshape(shape))
            if self.phase == "mean":
                self.assign(out_data[1], req[1], in_data[1])
            return
        part = in_data[0].asnumpy().astype(np.float64).ravel()
        if self.phase == "mean":
            total = self.layer.sum("mean", np.append(
                part, in_data[1].asnumpy().astype(np.float64)))
            count = total[-1:]
            self.assign(out_data[1], req[1], _like(count, in_data[1]))
            value = total[:-1] / count
        else:
            value = self.layer.sum("var", part) / in_data[1].asnumpy()
        self.assign(out_data[0], req[0], _like(value.reshape(shape), in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        count = (out_data[1] if self.phase == "mean" else in_data[1]).asnumpy()
        grad = out_grad[0].asnumpy().astype(np.float64).ravel()
        total = self.layer.sum("d" + self.phase, grad) / count
        self.assign(in_grad[0], req[0], _like(total.reshape(in_grad[0].shape), in_grad[0]))
        for i in range(1, len(in_grad)):
            self.assign(in_grad[i], req[i], mx.nd.zeros_like(in_grad[i]))
        if self.phase == "var":  # MXNet's BatchNorm updates these in its backward too
            m = float(np.float32(self.momentum))  # its momentum is a C float
            mean, var = in_data[2].reshape((-1,)), out_data[0].reshape((-1,))
            self.assign(aux[0], "write", aux[0] * m + mean * (1 - m))
            self.assign(aux[1], "write", aux[1] * m + var * (1 - m))


def _like(value: np.ndarray, array):
    """``value`` as an array on ``array``'s device, of its dtype."""
    return mx.nd.array(value, ctx=array.context, dtype=array.dtype)


@mx.operator.register(_OP)
class _SumProp(mx.operator.CustomOpProp):
    def __init__(self, layer: str, phase: str, momentum: str):
        super().__init__(need_top_grad=True)
        self.layer, self.phase, self.momentum = int(layer), phase, float(momentum)

    def list_arguments(self):
        return ["part", "count"] if self.phase == "mean" else ["part", "count", "mean"]

    def list_outputs(self):
        return ["mean", "count"] if self.phase == "mean" else ["var"]

    def list_auxiliary_states(self):
        return ["running_mean", "running_var"]

    def infer_shape(self, in_shape):
        channels = int(np.prod(in_shape[0]))
        outs = [in_shape[0], [1]] if self.phase == "mean" else [in_shape[0]]
        return in_shape, outs, [[channels], [channels]]

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return _Sum(_LAYERS[self.layer], self.phase, self.momentum)


class SyncBatchNorm(mx.gluon.HybridBlock):
    """``like`` (a ``gluon.nn.BatchNorm``, whose parameters it takes over, names and all) with
    its batch statistics summed over ``_LAYERS[layer]``'s devices and workers."""

    def __init__(self, like, layer: int):
        super().__init__(prefix=like.prefix, params=like.params)
        kwargs = _mx.batchnorm_settings(like)
        self.axis, self.eps = kwargs.get("axis", 1), kwargs.get("eps", 1e-5)
        self.momentum, self.fix_gamma = kwargs.get("momentum", 0.9), kwargs.get("fix_gamma")
        self.layer = layer
        # from the shared dict into this block's own (collect_params reads the latter)
        self.gamma, self.beta = self.params.get("gamma"), self.params.get("beta")
        self.running_mean = self.params.get("running_mean")
        self.running_var = self.params.get("running_var")

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        axis, common = self.axis, dict(op_type=_OP, layer=str(self.layer),
                                       momentum=str(self.momentum))
        part = F.sum(x, axis=axis, exclude=True, keepdims=True)
        count = F.sum(F.ones_like(F.slice_axis(x, axis=axis, begin=0, end=1))).reshape((1,))
        mean, total = F.Custom(part, count, running_mean, running_var, phase="mean", **common)
        centred = F.broadcast_sub(x, mean)
        squares = F.sum(F.square(centred), axis=axis, exclude=True, keepdims=True)
        var = F.Custom(squares, total, mean, running_mean, running_var, phase="var", **common)
        scale = F.rsqrt(var + self.eps)
        gamma = F.reshape_like(gamma, scale)
        # fix_gamma (scale=False): gamma counts as 1, as in MXNet's BatchNorm (and is used)
        scale = F.broadcast_mul(scale, F.ones_like(gamma) if self.fix_gamma else gamma)
        return F.broadcast_add(F.broadcast_mul(centred, scale), F.reshape_like(beta, scale))

    def __repr__(self):
        return f"SyncBatchNorm(axis={self.axis}, eps={self.eps}, momentum={self.momentum})"


def sync_batchnorm(net, kvstore="auto") -> int:
    """Make every ``BatchNorm`` of ``net`` (and MXNet's per-process ``SyncBatchNorm``) sum its
    batch statistics over all the devices its parameters live on and, in a ``dist_sync`` job,
    over every worker: in place, keeping each layer's parameters and their names (so
    checkpoints and ``load_parameters`` are unchanged). Returns how many layers it converted.

    Call it after the parameters have their shapes (one forward pass) and are on their devices,
    and before ``make_trainer``; every worker of a job must call it at the same point (it
    reserves kvstore keys, together). ``kvstore``: a kind (``'auto'``: the job's) or the job's
    KVStore; None keeps the sums to this process's devices. Layers with
    ``use_global_stats=True`` never use batch statistics and are left as they are. A
    hybridized net is traced again at its next call."""
    found = [(parent, bn) for parent, bn in _batchnorms(net)]
    if not found:
        return 0
    late = [bn.name for _, bn in found if _mx.deferred(bn.gamma)]
    if late:
        raise ValueError(f"sync_batchnorm: {late[0]} has no shape yet; run one forward pass "
                         "(or load the parameters) first")
    contexts = found[0][1].gamma.list_ctx()
    if len(contexts) > 1:
        raise ValueError(f"sync_batchnorm: {found[0][1].name} lives on {len(contexts)} devices; "
                         "it runs one device per worker (on CPUs MXNet 1.9 deadlocks devices that "
                         "wait for each other: docs/models.md): launch one worker per device "
                         "(gluondist launch -n DEVICES), each with ctx=one device")
    kv, keys = _job_keys(kvstore, [bn.gamma.shape[0] for _, bn in found], len(contexts))
    for i, (parent, bn) in enumerate(found):
        _LAYERS.append(_Layer(bn.name, len(bn.gamma.list_ctx()), kv, keys[i] if keys else None,
                              bn))
        _mx.replace_child(parent, bn, SyncBatchNorm(bn, len(_LAYERS) - 1))
    _mx.forget_graphs(net)
    return len(found)


def plain_batchnorm(net) -> int:
    """Undo :func:`sync_batchnorm`: put each converted layer of ``net`` back as the BatchNorm
    it was, with the same parameters (trained values and running statistics included), so
    that ``net.export`` writes a graph any MXNet loads (a converted layer's custom operator
    exists only in the process that made it). ``fit(sync_batchnorm=True)`` does this however
    it ends. Returns how many layers it put back."""
    found = list(_converted(net))
    inputs = _mx.traced(net)
    for parent, layer in found:
        _mx.replace_child(parent, layer, _LAYERS[layer.layer].original)
    if found:
        _mx.forget_graphs(net)
        _mx.retrace(net, inputs)  # export needs a graph: the last call's, traced anew
    return len(found)


def check_shares(samples: int, global_batch: int, workers: int, last_batch: str) -> None:
    """Refuse a run whose last global batch leaves a worker no sample: that worker's stand-in
    pass (one sample weighed with zero) would count in every layer's sums."""
    left = samples % global_batch if last_batch == "keep" else 0
    if 0 < left < workers:
        raise ValueError(f"sync_batchnorm: {samples} samples in global batches of "
                         f"{global_batch} leave a last batch of {left}, which gives some of the "
                         f"{workers} workers no sample; drop it (a DataLoader with "
                         "last_batch='discard') or use a sample count that gives each a share")


def _batchnorms(block):
    """``(parent, layer)`` for each BatchNorm below ``block`` that uses batch statistics: MXNet's
    BatchNorm and SyncBatchNorm, and their subclasses that keep their forward; a BatchNorm
    with a forward of its own (MXNet's BatchNormReLU) is refused."""
    kinds = (mx.gluon.contrib.nn.SyncBatchNorm, mx.gluon.nn.BatchNorm)
    for child in _mx.children(block):
        kind = next((k for k in kinds if isinstance(child, k)), None)
        if kind is None and not _mx.is_batchnorm(child):
            yield from _batchnorms(child)
        elif kind is None or any(getattr(type(child), m) is not getattr(kind, m)
                                 for m in ("forward", "hybrid_forward")):
            raise ValueError(
                f"sync_batchnorm: {child.name} is a {type(child).__name__}, a BatchNorm with a "
                "forward of its own, which sync_batchnorm cannot keep: build it from "
                "nn.BatchNorm and a layer for the rest (for BatchNormReLU: nn.BatchNorm, then "
                "nn.Activation('relu'))")
        elif not _mx.batchnorm_settings(child).get("use_global_stats"):
            yield block, child


def _converted(block):
    """``(parent, layer)`` for each layer below ``block`` that sync_batchnorm converted."""
    for child in _mx.children(block):
        if isinstance(child, SyncBatchNorm):
            yield block, child
        else:
            yield from _converted(child)


def _job_keys(kvstore, channels: List[int], devices: int):
    """``(kv, keys)``: in a dist_sync job the job's kvstore and each layer's keys, made
    (every worker together); else ``(None, None)``."""
    if not isinstance(kvstore, (str, type(None))):
        kv = kvstore
    elif is_distributed() and resolve_mode(kvstore, devices) is not None:
        kv = NODE.create(kvstore, devices)
    else:
        return None, None
    if "dist" not in kv.type:
        return None, None
    if kv.type == "dist_async":
        raise ValueError("sync_batchnorm needs a job whose workers step together: launch "
                         "with --kvstore dist_sync, or train without sync_batchnorm")
    if NODE.compression is not None:
        raise ValueError("sync_batchnorm cannot travel with MXNet's 2-bit compression, which "
                         "compresses every push of the job: use compression='fp16' or none")
    offset = NODE.reserve_keys(kv, 4 * len(channels), agree=True, batchnorm=True)
    keys, sizes = [], []
    for i, c in enumerate(channels):
        names = ("mean", "var", "dmean", "dvar")
        keys.append({n: offset + 4 * i + j for j, n in enumerate(names)})
        sizes += [c + 1, c, c, c]
    quiet()
    kv.init(list(range(offset, offset + len(sizes))),
            [mx.nd.zeros((n,), dtype="float64") for n in sizes])
    NODE.plain_pushes = True
    return kv, keys
