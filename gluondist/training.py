"""``gluondist.fit``: train a Gluon model in a notebook, on several devices, or as one worker of a
launched parameter-server job, with the same call."""
from __future__ import annotations

import hashlib
import math
import os
import random
import sys
from collections.abc import Mapping
from typing import Optional, Sequence

import numpy as np

from . import checkpoint, kvstore as kvs, metrics as mtr, parallel
from ._mx import mx
from .callbacks import (Callback, CallbackList, Checkpointer, EarlyStopping, EpochLogger,
                        Heartbeat, History, ProgressBar)
from .data import source

CLIP_KEY = "clip_global_norm"  # our key in optimizer_params: clip gradients by global norm


class Run:
    """The state of one fit call, as callbacks see it (see :class:`gluondist.Callback`)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)
        self.epoch, self.stop_training = self.start, False


def fit(net, train_data, loss=None, optimizer="sgd", optimizer_params=None, epochs=1,
        batch_size=None, ctx=None, kvstore="auto", val_data=None, metrics="accuracy",
        callbacks: Optional[Sequence[Callback]] = None, checkpoint_dir=None, resume=True,
        progress=None, seed=None, terminate_on_nan=True) -> History:
    """Train ``net`` and return a :class:`~gluondist.callbacks.History`.

    ``train_data``/``val_data``: an ``(X, y)`` tuple of numpy arrays or NDArrays, a
    ``gluon.data.Dataset`` or a ``DataLoader``. ``batch_size`` is per worker (default: the
    DataLoader's, else 32); it is split across the devices ``ctx`` (see
    :func:`gluondist.parallel.contexts`). Under ``gluondist launch`` each of N workers takes its
    slice of every global batch of ``batch_size * N``, so the job computes what one process with
    that batch would. ``loss=None`` is softmax cross-entropy. ``optimizer_params`` goes to the
    optimizer, plus ``clip_global_norm`` (clip the mean gradient to this 2-norm).

    ``checkpoint_dir``: after each epoch worker 0 writes a checkpoint (see
    :mod:`gluondist.checkpoint`); with ``resume`` a later call continues after the last complete
    epoch, and ``resume=False`` starts a fresh run there. ``seed`` makes the run reproducible.
    ``progress``: True/False, or None for a bar only when interactive (else a log line).
    ``terminate_on_nan``: a NaN or infinite training loss raises FloatingPointError.

    Raises ValueError before training for inconsistent or unusable input."""
    plan = _prepare(net, train_data, loss, optimizer, optimizer_params, epochs, batch_size, ctx,
                    kvstore, val_data, metrics, callbacks, checkpoint_dir, seed)
    run = _start(plan, resume, progress, terminate_on_nan)
    run.callbacks.on_train_begin(run)
    for epoch in range(run.start, run.epochs):
        run.epoch = epoch
        run.callbacks.on_epoch_begin(run, epoch)
        logs = _train_epoch(run, epoch)
        run.step.average_untrained()  # BatchNorm statistics: one value on every copy
        if run.val is not None:
            logs.update({f"val_{k}": v for k, v in _evaluate(run, run.val).items()})
        run.callbacks.on_epoch_end(run, epoch, logs)
        if _stop_agreed(run):
            break
    run.callbacks.on_train_end(run)
    mx.nd.waitall()
    return run.history


class _Plan:
    """What fit checked before anything trains."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _prepare(net, train_data, loss, optimizer, optimizer_params, epochs, batch_size, ctx,
             kvstore, val_data, metrics, callbacks, checkpoint_dir, seed) -> _Plan:
    """Check every argument and one batch of each data source; initialise the net."""
    ctxs = parallel.contexts(ctx)
    kind = kvs.resolve_kind(kvstore, len(ctxs))
    train, loader_batch = source(train_data, "train_data")
    val = source(val_data, "val_data")[0] if val_data is not None else None
    workers = kvs.num_workers() if kind in kvs.DIST_KINDS else 1
    if batch_size is None:  # Keras' default, but never more than each worker's share
        batch_size = loader_batch or max(1, min(32, len(train) // workers))
    _check_count(batch_size, "batch_size", 1)
    _check_count(epochs, "epochs", 0)
    if batch_size * workers > len(train):
        raise ValueError(f"batch_size {batch_size} x {workers} worker(s) exceeds the "
                         f"{len(train)} training samples; lower batch_size")
    opt_params, clip = _check_optimizer(optimizer, optimizer_params)
    metric_list = mtr.create(metrics)
    loss = loss or mx.gluon.loss.SoftmaxCrossEntropyLoss()
    callbacks = _check_callbacks(callbacks)
    if checkpoint_dir is not None:
        _check_directory(checkpoint_dir)
    if seed is not None:
        mx.random.seed(int(seed))
    parallel.initialize(net, ctxs)
    _check_batch(net, loss, train, "train_data", ctxs[0], batch_size, metric_list)
    if val is not None:
        _check_batch(net, loss, val, "val_data", ctxs[0], batch_size, metric_list)
    keys = ["loss", *(m.name for m in metric_list)]
    keys += [f"val_{k}" for k in keys] if val is not None else []
    for cb in callbacks:
        if isinstance(cb, EarlyStopping):
            cb.check(keys)
    return _Plan(net=net, ctxs=ctxs, kind=kind, train=train, val=val, batch_size=batch_size,
                 epochs=epochs, optimizer=optimizer, opt_params=opt_params, clip=clip,
                 metrics=metric_list, loss=loss, callbacks=callbacks,
                 checkpoint_dir=checkpoint_dir, seed=seed)


def _start(plan: _Plan, resume: bool, progress, terminate_on_nan: bool) -> Run:
    """Restore from a checkpoint, join the job's kvstore, make the trainer: ready to train."""
    net, ctxs, seed = plan.net, plan.ctxs, plan.seed
    ckpt = _restore(plan, resume)
    if ckpt is not None:
        seed = ckpt.state["seed"]
    kv = kvs.create(plan.kind, len(ctxs)) if plan.kind is not None else None
    distributed = kv is not None and "dist" in kv.type
    rank, workers = (kv.rank, kv.num_workers) if distributed else (0, 1)
    if seed is None:
        seed = _job_seed() if distributed else random.SystemRandom().randrange(2 ** 31)
    start = ckpt.epoch + 1 if ckpt is not None else 0
    trainer = kvs.make_trainer(net.collect_params(), plan.optimizer, plan.opt_params or None,
                               kv, len(ctxs), plan.batch_size)
    step = kvs.TrainStep(trainer, kv, ctxs, plan.batch_size, plan.clip)
    if step.agree:
        total, squares = kvs.allreduce([start, start * start])
        if workers * squares != total * total:
            raise RuntimeError("workers found different checkpoints in checkpoint_dir: it must "
                               "be one directory that every worker sees (a shared filesystem)")
    callbacks = _callback_list(plan, progress)
    history = callbacks.first(History)
    if ckpt is not None:
        checkpoint.restore_trainer(ckpt, trainer)
        history.history = {k: list(v) for k, v in ckpt.state["history"].items()}
        history.epoch = list(range(start))
        callbacks.load_state_dict(ckpt.state["callbacks"])
    sampler = kvs.ShardedBatchSampler(len(plan.train), plan.batch_size, workers, rank, seed=seed)
    return Run(net=net, trainer=trainer, step=step, history=history, callbacks=callbacks,
               start=start, epochs=plan.epochs, rank=rank, num_workers=workers, seed=seed,
               ctxs=ctxs, train=plan.train, val=plan.val, loss=plan.loss, metrics=plan.metrics,
               batch_size=plan.batch_size, sampler=sampler, steps=len(sampler),
               terminate_on_nan=terminate_on_nan)


def _restore(plan: _Plan, resume: bool) -> Optional[checkpoint.Checkpoint]:
    """Load the newest checkpoint of this run into the net (every worker reads it)."""
    directory = plan.checkpoint_dir
    if directory is None:
        return None
    if not resume:
        if kvs.rank() == 0:
            checkpoint.start_fresh(directory)
        return None
    ckpt = checkpoint.load_latest(directory)
    if ckpt is None:
        return None
    if ckpt.state["signature"] != checkpoint.signature(plan.net):
        raise ValueError(f"checkpoint_dir {directory} holds a checkpoint of a different model "
                         f"({ckpt.path.name}); pass a directory of its own, or resume=False to "
                         "start a fresh run there (the old checkpoints are then never resumed)")
    checkpoint.restore_net(ckpt, plan.net)
    checkpoint.set_rng_states(ckpt.state["rng"])
    return ckpt


def _callback_list(plan: _Plan, progress) -> CallbackList:
    """The user's callbacks with fit's own around them, unless the user passed their kind:
    the bar or log line first, then the user's, History, the heartbeat, the checkpoint last
    (so it records what every other callback did this epoch)."""
    mine = plan.callbacks
    has = lambda kind: any(isinstance(cb, kind) for cb in mine)
    before, after = [], []
    if not has(ProgressBar) and not has(EpochLogger):
        before.append(ProgressBar() if (progress if progress is not None else _interactive())
                      else EpochLogger())
    if not has(History):
        after.append(History())
    if not has(Heartbeat):
        after.append(Heartbeat())
    if plan.checkpoint_dir is not None and not has(Checkpointer):
        after.append(Checkpointer(plan.checkpoint_dir))
    return CallbackList(before + mine + after)


def _train_epoch(run: Run, epoch: int) -> dict:
    """One pass over this worker's share of the training data; returns the epoch's logs."""
    run.sampler.set_epoch(epoch)
    # Re-seed per epoch (rank apart) so dropout and friends replay alike after a resume.
    mx.random.seed((run.seed * 1000003 + epoch * 9973 + run.rank) % (2 ** 31))
    for m in run.metrics:
        m.reset()
    sums, count, pending = mtr.DeviceSums(), 0, None
    hooks = run.callbacks.batch_hooks
    for batch, (idx, global_count) in enumerate(run.sampler.batches()):
        n = len(idx)  # 0: this worker's share of a tiny last batch; it still pushes (zeros)
        data, label = run.train.load(idx if n else np.arange(1), run.ctxs)
        outputs, losses = parallel.forward_backward(run.net, run.loss, data, label, run.ctxs,
                                                    run.step.loss_scale(n))
        batch_sums = [(i, l.sum()) for i, l in enumerate(losses) if l is not None] if n else []
        if run.terminate_on_nan:
            if run.step.distributed:  # before the push: no other worker ever sees the NaN
                _check_finite(run, (batch, batch_sums))
            else:  # one batch late, so that the device never waits for Python
                _check_finite(run, pending)
                pending = (batch, batch_sums)
        run.step(global_count)
        for i, s in batch_sums:
            sums.add(i, s)
        count += n
        if n:
            for m in run.metrics:
                m.update(label, outputs)
        if hooks:
            run.callbacks.on_batch_end(run, batch, _BatchLogs(batch, n, batch_sums))
    _check_finite(run, pending)
    return mtr.reduce({"loss": (sums.total(), count)}, run.metrics,
                      kvs.allreduce if run.step.agree else None)


def _evaluate(run: Run, src) -> dict:
    """Loss and metrics over all of ``src``; in dist_sync each worker takes its share."""
    for m in run.metrics:
        m.reset()
    workers, rank = (run.num_workers, run.rank) if run.step.agree else (1, 0)
    sampler = kvs.ShardedBatchSampler(len(src), run.batch_size, workers, rank, shuffle=False)
    sums, count = mtr.DeviceSums(), 0
    for idx, _ in sampler.batches():
        if len(idx) == 0:
            continue
        data, label = src.load(idx, run.ctxs)
        outputs = [run.net(d) if d is not None else None for d in data]
        for i, (out, lab) in enumerate(zip(outputs, label)):
            if out is not None:
                sums.add(i, run.loss(out, lab).sum())
        count += len(idx)
        for m in run.metrics:
            m.update(label, outputs)
    return mtr.reduce({"loss": (sums.total(), count)}, run.metrics,
                      kvs.allreduce if run.step.agree else None)


def _stop_agreed(run: Run) -> bool:
    """A stop requested on any worker stops all of them (one stopping alone would deadlock)."""
    if run.step.agree:
        run.stop_training = kvs.allreduce([float(run.stop_training)])[0] > 0
    return run.stop_training


def _check_finite(run: Run, pending) -> None:
    if pending is None:
        return
    batch, batch_sums = pending
    value = sum(s.asscalar() for _, s in batch_sums)
    if math.isfinite(value):
        return
    where = f" on worker {run.rank}" if run.num_workers > 1 else ""
    raise FloatingPointError(
        f"training loss is {value} in epoch {run.epoch + 1}/{run.epochs}, batch "
        f"{batch + 1}/{run.steps}{where}: training stopped (checkpoints of earlier epochs are "
        "kept); look for extreme values in the data or lower the learning rate, or pass "
        "terminate_on_nan=False to train on")


class _BatchLogs(Mapping):
    """``on_batch_end``'s logs: ``batch``, ``size`` and ``loss``, the loss read from the device
    only when a callback asks for it."""

    def __init__(self, batch: int, size: int, batch_sums):
        self._values = {"batch": batch, "size": size}
        self._sums = batch_sums

    def __getitem__(self, key):
        if key == "loss" and key not in self._values:
            total = sum(float(s.asscalar()) for _, s in self._sums)
            self._values["loss"] = total / self._values["size"] if self._sums else float("nan")
        return self._values[key]

    def __iter__(self):
        return iter(("batch", "size", "loss"))

    def __len__(self):
        return 3


def _check_count(value, name: str, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        kind = "positive" if least > 0 else "non-negative"
        raise ValueError(f"{name} must be a {kind} integer, not {value!r}")


def _check_optimizer(optimizer, optimizer_params):
    if optimizer_params is not None and not isinstance(optimizer_params, dict):
        raise ValueError(f"optimizer_params must be a dict such as {{'learning_rate': 0.1}}, "
                         f"not {optimizer_params!r}")
    params = dict(optimizer_params or {})
    clip = params.pop(CLIP_KEY, None)
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float))
                             or not clip > 0):
        raise ValueError(f"optimizer_params[{CLIP_KEY!r}] must be a positive number, not {clip!r}")
    if isinstance(optimizer, mx.optimizer.Optimizer):
        if params:
            raise ValueError(f"optimizer_params {sorted(params)} given with an optimizer "
                             "instance: set them on the instance, or pass the optimizer's name")
        return params, clip
    if not isinstance(optimizer, str):
        raise ValueError(
            f"optimizer must be a name or an mx.optimizer.Optimizer, not {optimizer!r}")
    known = mx.optimizer.Optimizer.opt_registry
    if optimizer.lower() not in known:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of "
                         f"{', '.join(sorted(known))}, or an mx.optimizer.Optimizer")
    try:  # catch bad keyword arguments now, with the optimizer's own message
        mx.optimizer.create(optimizer, **params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"optimizer_params for {optimizer!r}: {exc}") from exc
    return params, clip


def _check_callbacks(callbacks) -> list:
    callbacks = list(callbacks or [])
    for i, cb in enumerate(callbacks):
        if not isinstance(cb, Callback):
            raise ValueError(f"callbacks[{i}] is a {type(cb).__name__}, not a "
                             "gluondist.Callback; subclass gluondist.Callback")
    return callbacks


def _check_directory(directory) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"checkpoint_dir {directory}: {exc.strerror}") from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"checkpoint_dir {directory} is not writable")


def _check_batch(net, loss, src, name, ctx, batch_size, metric_list) -> None:
    """Run the net, the loss and the metrics on the first batch of ``src``: wrong shapes, labels
    out of range and metrics that cannot handle the data fail now, with their own reason."""
    data, label = src.load(np.arange(min(len(src), batch_size)), [ctx])
    data, label = data[0], label[0]
    try:
        out = net(data)
        out.wait_to_read()  # MXNet reports errors when a result is read
    except Exception as exc:
        raise ValueError(f"net cannot take a batch of {name} (shape {data.shape}): "
                         f"{mtr.last_line(exc)}") from exc
    if isinstance(out, (tuple, list)):
        raise ValueError(f"the net returns {len(out)} outputs; fit trains nets with one output")
    _check_labels(loss, out, label, src, name)
    try:
        loss(out, label).wait_to_read()
    except Exception as exc:
        raise ValueError(f"loss cannot be computed on a batch of {name} (outputs of shape "
                         f"{out.shape}, labels {label.shape}): {mtr.last_line(exc)}") from exc
    mtr.check(metric_list, [label], [out], f"a batch of {name}")


def _check_labels(loss, out, label, src, name) -> None:
    """Sparse softmax cross-entropy needs one integer class 0..C-1 per sample: the loss would
    otherwise clip bad labels and train on without a word."""
    if not isinstance(loss, mx.gluon.loss.SoftmaxCrossEntropyLoss) or \
            not getattr(loss, "_sparse_label", True):
        return
    classes = out.shape[-1]
    if label.size != out.size // classes:
        raise ValueError(f"{name} has labels of shape {label.shape} for outputs of shape "
                         f"{out.shape}: softmax cross-entropy takes one class index per sample "
                         f"(labels of shape {out.shape[:-1]})")
    labels = np.asarray(src.labels) if src.labels is not None else label.asnumpy()
    low, high = labels.min(), labels.max()
    if low < 0 or high >= classes or not np.all(np.equal(np.mod(labels, 1), 0)):
        checked = "" if src.labels is not None else " (in its first batch)"
        raise ValueError(f"{name} has labels from {low:g} to {high:g}{checked} but the net "
                         f"outputs {classes} classes (labels must be integers 0..{classes - 1})")


def _job_seed() -> int:
    """A seed every worker of this job derives alike (it differs from job to job)."""
    job = f"{os.environ.get('DMLC_PS_ROOT_URI')}:{os.environ.get('DMLC_PS_ROOT_PORT')}"
    return int(hashlib.sha256(job.encode()).hexdigest()[:8], 16) % (2 ** 31)


def _interactive() -> bool:
    return "ipykernel" in sys.modules or sys.stderr.isatty()
