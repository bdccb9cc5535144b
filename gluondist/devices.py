"""The devices of one process, below everything else of training: which contexts to train on,
a batch split across them, forward and backward on each, a parameter assigned on all of them,
and the gradients' global norm clipped. :mod:`gluondist.parallel` (the public door),
:mod:`gluondist.pipeline`, :mod:`gluondist.kv.trainer` and fit import these; this module
imports nothing of gluondist but MXNet's loader.

What the copied recipe gets wrong, and what is done here instead:

* ``net.initialize()`` on the default context only: parameters are initialised (or moved) on
  every context in use (:func:`initialize`).
* ``nd.split(data, 4)`` fails when the batch does not divide, and ``split_and_load(
  even_split=False)`` fails when the batch is smaller than the number of devices
  (apache/mxnet#13909): :func:`split` handles both.
* ``trainer.step(batch_size, grad_norm=1)`` inside a loop over gradients: ``grad_norm`` is not an
  argument; there is one step per batch, with the whole batch's size, and global-norm clipping is
  :func:`clip_global_norm`.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import numpy as np

from . import _mx
from .trees import tree_map
from ._mx import mx

Contexts = Union[None, int, str, "mx.Context", Sequence[Union[int, "mx.Context"]]]


def contexts(ctx: Contexts = None) -> List["mx.Context"]:
    """The devices to train on.

    ``None``: every GPU, else ``[mx.cpu()]``. An int n: n GPUs when there are GPUs, else n CPU
    contexts (``cpu(0)..cpu(n-1)``, which exercise the multi-device path on any machine).
    A string such as ``'gpu:0,gpu:1'`` or ``'cpu'``; a list of GPU ids; a Context or a list of
    them. Raises ValueError for GPUs that are not there."""
    gpus = mx.context.num_gpus()
    if ctx is None:
        return [mx.gpu(i) for i in range(gpus)] or [mx.cpu()]
    if isinstance(ctx, mx.Context):
        ctx = [ctx]
    elif isinstance(ctx, bool):
        raise ValueError(f"ctx must be an int, a string, a Context or a list, not {ctx!r}")
    elif isinstance(ctx, int):
        if ctx < 1:
            raise ValueError(f"ctx={ctx}: ask for at least one device")
        ctx = [mx.gpu(i) for i in range(ctx)] if gpus else [mx.cpu(i) for i in range(ctx)]
    elif isinstance(ctx, str):
        ctx = [_parse_context(part) for part in ctx.split(",") if part.strip()]
    else:
        ctx = [mx.gpu(c) if isinstance(c, int) else c for c in ctx]
    if not ctx or not all(isinstance(c, mx.Context) for c in ctx):
        raise ValueError(f"ctx must name at least one device, got {ctx!r}")
    missing = [str(c) for c in ctx if c.device_type == "gpu" and c.device_id >= gpus]
    if missing:
        raise ValueError(f"{', '.join(missing)} requested but this machine has {gpus} GPU(s); "
                         "use ctx=None to take what is there")
    return list(ctx)


def _parse_context(text: str) -> "mx.Context":
    kind, _, index = text.strip().partition(":")
    if kind not in ("cpu", "gpu") or (index and not index.isdigit()):
        raise ValueError(f"cannot read device {text!r}; write 'cpu', 'gpu:0' or 'cpu:0,cpu:1'")
    return mx.Context(kind, int(index or 0))


def split(data, ctxs: Sequence["mx.Context"],
          owned: bool = False) -> List[Optional["mx.nd.NDArray"]]:
    """Split a batch along axis 0 into one part per context, loaded on it.

    Parts differ in size by at most one sample. When the batch is smaller than the number of
    contexts the trailing parts are None (no device gets an empty array to choke on).
    ``owned=True`` says a numpy ``data`` is a fresh array nobody else uses (fit's batches): it is
    then shared with MXNet instead of copied, and marked read-only."""
    if len(ctxs) == 1:  # the common case, on the hot path: no slicing arithmetic
        return [_on(data, ctxs[0], owned)]
    n, k = data.shape[0], len(ctxs)
    sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]  # as np.array_split
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [_on(data[int(lo):int(hi)], ctx, owned) if hi > lo else None
            for ctx, lo, hi in zip(ctxs, bounds[:-1], bounds[1:])]


def _on(data, ctx, owned: bool):
    if isinstance(data, mx.nd.NDArray):
        return data.as_in_context(ctx)
    if owned and data.flags["C_CONTIGUOUS"] and data.dtype in (np.float32, np.float16):
        return mx.nd.from_numpy(data, zero_copy=True).as_in_context(ctx)  # no copy on cpu(0)
    return mx.nd.array(data, ctx=ctx, dtype=data.dtype)


def settle(params) -> None:
    """Put every initialised parameter of ``params`` (a Block, a ParameterDict or a list of
    Parameters), on every device, in MXNet's default memory layout: call it after an inference
    pass (a forward outside ``autograd.record()``) and before the next training step.
    ``make_trainer`` does at its start and ``fit`` after each of its validation passes.

    On MXNet's CPU builds an inference pass reorders a convolution's weight into oneDNN's
    layout, and the next training forward reorders it back from inside the convolution, as an
    operation queued behind those already issued: behind that step's own backward and update
    (see :func:`gluondist._mx.default_layout`). A ResNet-18 trained so in one process read its
    weights with a segmentation fault in 4 runs of 11; after this, in none of 30."""
    if hasattr(params, "collect_params"):
        params = params.collect_params()
    if hasattr(params, "values"):
        params = params.values()
    _mx.default_layout([a for p in params if _mx.initialised(p) for a in p.list_data()])


def is_initialized(net) -> bool:
    """True when every parameter of ``net`` has been initialised (possibly deferred)."""
    try:
        for param in net.collect_params().values():
            param.list_ctx()
    except RuntimeError:
        return False
    return True


def initialize(net, ctxs: Sequence["mx.Context"], sample=None, init=None) -> None:
    """Initialise ``net`` on every context (Xavier unless ``init`` is given), or move an
    already initialised net there, keeping its values. With ``sample`` (one input batch), run
    one forward pass so deferred shapes become known."""
    if not is_initialized(net):
        net.initialize(init or mx.init.Xavier(), ctx=list(ctxs))
    elif net.collect_params().list_ctx() != list(ctxs):
        net.collect_params().reset_ctx(list(ctxs))
    if sample is not None:
        net(split(sample, ctxs[:1])[0])


def assign(param, value) -> None:
    """Copy ``value`` into every device's copy of ``param``, in place. Unlike
    ``Parameter.set_data`` this never resets a ``dist_async`` trainer's kvstore (MXNet raises
    "Cannot reset distributed KVStore" there)."""
    for data in param.list_data():
        value.copyto(data)


def forward_backward(net, loss_fn, data_parts, label_parts, ctxs: Sequence["mx.Context"],
                     scale: float = 1.0, before_backward=None):
    """Record forward and backward on every context; returns ``(outputs, losses)``, one entry
    per context, None where its part was None.

    A data part is an NDArray, or a tuple of them for a net of several inputs (called as
    ``net(*part)``); a label part is whatever ``loss_fn(output, label_part)`` takes. ``loss_fn``
    returns the per-sample loss, or a tuple whose first item is (backward runs on it; the whole
    tuple is returned in ``losses``).

    A context whose part is None (a batch smaller than the device count) runs one sample of
    another part with a zero weight, so its gradients are fresh zeros and the trainer's step
    still covers every context. ``scale`` multiplies every loss before backward (0 makes a
    worker with an empty share of the last global batch push zeros and keep in step). After
    such a stand-in pass (a part of None, or scale 0) the parameters no gradient trains
    (BatchNorm's running statistics) are put back as they were before it.

    ``before_backward(outputs, losses)``, if given, runs between the passes. A value computed
    and read there (the loss's sum) waits for the forward pass alone; computed after backward
    is issued, its operations would queue behind backward's (MXNet's CPU engine runs them in
    the order they became ready), and the read, with the gradient pushes issued after it,
    would wait for all of backward."""
    filled = [i for i, part in enumerate(data_parts) if part is not None]
    if not filled:
        raise ValueError("forward_backward needs at least one non-empty part")
    donor = filled[0]
    outputs, losses, heads = [], [], []
    untrained = [p for p in net.collect_params().values() if p.grad_req == "null"] \
        if len(filled) < len(ctxs) or scale == 0 else []
    kept = []
    with mx.autograd.record():
        for ctx, data, label in zip(ctxs, data_parts, label_parts):
            empty = data is None
            if empty:
                data = _first(data_parts[donor], ctx)
                label = _first(label_parts[donor], ctx)
            # a stand-in must not move BatchNorm's running statistics either (MXNet's CPU
            # BatchNorm updates them in backward, after the forward pass)
            if empty or scale == 0:
                kept += [(p.data(ctx), p.data(ctx).copy()) for p in untrained]
            out = net(*data) if isinstance(data, tuple) else net(data)
            loss = loss_fn(out, label)
            head = loss[0] if isinstance(loss, tuple) else loss
            heads.append(head * 0 if empty else head * scale if scale != 1.0 else head)
            outputs.append(None if empty else out)
            losses.append(None if empty else loss)
    if before_backward is not None:
        before_backward(outputs, losses)
    mx.autograd.backward(heads)
    for array, before in kept:
        before.copyto(array)
    return outputs, losses


def _first(part, ctx):
    """The first sample of a (nested tuple of) NDArray part, on ``ctx``."""
    return tree_map(lambda array, _: array[:1].as_in_context(ctx), part)


def clip_global_norm(trainer, ctxs: Sequence["mx.Context"], max_norm: float) -> float:
    """Scale the (reduced) gradients so their global 2-norm is at most ``max_norm``.

    Call between ``trainer.allreduce_grads()`` and ``trainer.update()``: then every context holds
    the same summed gradient (in ``dist_sync``, every worker's), and the norm is computed once
    per context (never across copies). Returns the norm before clipping. Under ``dist_async``
    there is no summed gradient at step time (the servers apply each push alone):
    :class:`gluondist.kvstore.TrainStep` clips each worker's own gradient there
    (:func:`clip_local_norm`)."""
    norm = 0.0
    # one copy of the gradients per context; a pipeline's parameters (each on one context of
    # its stage) are one copy spread across contexts
    params = [p for p in _mx.trainer_params(trainer) if p.grad_req != "null"]
    for grads in zip(*[p.list_grad() for p in params]):
        norm = mx.gluon.utils.clip_global_norm(list(grads), max_norm, check_isfinite=False)
    return float(norm.asscalar())


def clip_local_norm(trainer, ctxs: Sequence["mx.Context"], max_norm: float) -> float:
    """Scale this process's gradients so the 2-norm of their sum over ``ctxs`` (this worker's
    own gradient, before any kvstore sums it) is at most ``max_norm``; returns that norm before
    clipping. What ``dist_async`` clips: each worker's gradient before it is pushed."""
    params = [p for p in _mx.trainer_params(trainer) if p.grad_req != "null"]
    sums = [mx.nd.add_n(*[p.grad(c).as_in_context(ctxs[0]) for c in ctxs]) for p in params]
    norm = float(mx.nd.sqrt(mx.nd.add_n(*[(g * g).sum() for g in sums])).asscalar())
    if norm > max_norm:
        for p in params:
            for c in ctxs:
                p.grad(c)[:] *= max_norm / norm
    return norm
