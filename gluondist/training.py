"""``gluondist.fit``: train a Gluon model in a notebook, on several devices, or as one worker of a
launched parameter-server job, with the same call."""
from __future__ import annotations

import hashlib
import logging
import os
import random
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from . import checkpoint, heartbeat, kvstore as kvs, parallel
from ._mx import mx
from .callbacks import Callback, History
from .data import source

log = logging.getLogger(__name__)

CLIP_KEY = "clip_global_norm"  # our key in optimizer_params: clip gradients by global norm


class Run:
    """The state callbacks see (see :class:`gluondist.callbacks.Callback`)."""

    def __init__(self, net, trainer, history: History):
        self.net, self.trainer, self.history = net, trainer, history
        self.epoch = 0
        self.stop_training = False


def _accumulate(sums: dict, i: int, value) -> None:
    """Add ``value`` to context ``i``'s running sum, kept on that context's device."""
    if i in sums:
        sums[i] += value
    else:
        sums[i] = value


class _Accuracy:
    """Accuracy accumulated on each device: no host sync per batch (mx.metric's does one)."""
    name = "accuracy"

    def __init__(self):
        self.reset()

    def reset(self):
        self.correct, self.count = {}, 0

    def update(self, labels, preds):
        """``labels``/``preds``: one per context, None where a context had no samples."""
        for i, (label, pred) in enumerate(zip(labels, preds)):
            if pred is None:
                continue
            if label.ndim != pred.ndim - 1:
                label = label.reshape(pred.shape[:-1])
            hits = (pred.argmax(axis=-1) == label.astype(pred.dtype, copy=False)).sum()
            _accumulate(self.correct, i, hits)  # by context position: cheap to key
            self.count += label.shape[0]

    def sums(self):
        return float(sum(c.asscalar() for c in self.correct.values())), self.count


class _Wrapped:
    """An ``mx.metric.EvalMetric`` seen through the interface of :class:`_Accuracy`."""

    def __init__(self, metric):
        self.metric, self.name = metric, metric.name
        self.reset = metric.reset

    def update(self, labels, preds):
        pairs = [(l, p) for l, p in zip(labels, preds) if p is not None]
        self.metric.update([l for l, _ in pairs], [p for _, p in pairs])

    def sums(self):
        return float(self.metric.sum_metric), self.metric.num_inst


def _metrics(metrics) -> list:
    if metrics is None:
        return []
    if isinstance(metrics, (str, mx.metric.EvalMetric)):
        metrics = [metrics]
    out = []
    for m in metrics:
        if isinstance(m, str) and m.lower() in ("acc", "accuracy"):
            out.append(_Accuracy())
            continue
        try:
            out.append(_Wrapped(mx.metric.create(m) if isinstance(m, str) else m))
        except Exception:
            known = ", ".join(sorted(mx.metric.EvalMetric._registry.keys())) \
                if hasattr(mx.metric.EvalMetric, "_registry") else "accuracy, mse, mae, f1, ..."
            raise ValueError(f"unknown metric {m!r}; use a name such as {known}, or an "
                             "mx.metric.EvalMetric") from None
    return out


def _check_optimizer(optimizer, optimizer_params):
    params = dict(optimizer_params or {})
    clip = params.pop(CLIP_KEY, None)
    if clip is not None and not clip > 0:
        raise ValueError(f"optimizer_params[{CLIP_KEY!r}] must be a positive number, not {clip!r}")
    if isinstance(optimizer, str):
        known = mx.optimizer.Optimizer.opt_registry
        if optimizer.lower() not in known:
            raise ValueError(f"unknown optimizer {optimizer!r}; use one of "
                             f"{', '.join(sorted(known))}, or an mx.optimizer.Optimizer")
        try:  # catch bad keyword arguments now, with the optimizer's own message
            mx.optimizer.create(optimizer, **params)
        except TypeError as exc:
            raise ValueError(f"optimizer_params for {optimizer!r}: {exc}") from None
    elif not isinstance(optimizer, mx.optimizer.Optimizer):
        raise ValueError(
            f"optimizer must be a name or an mx.optimizer.Optimizer, not {optimizer!r}")
    return params, clip


def _job_seed() -> int:
    """A seed every worker of this job derives alike (it differs from job to job)."""
    job = f"{os.environ.get('DMLC_PS_ROOT_URI')}:{os.environ.get('DMLC_PS_ROOT_PORT')}"
    return int(hashlib.sha256(job.encode()).hexdigest()[:8], 16) % (2 ** 31)


def _signature(net) -> List[tuple]:
    return sorted((name, tuple(p.shape)) for name, p in net._collect_params_with_prefix().items())


def fit(net, train_data, loss=None, optimizer="sgd", optimizer_params=None, epochs=1,
        batch_size=None, ctx=None, kvstore="auto", val_data=None, metrics="accuracy",
        callbacks: Optional[Sequence[Callback]] = None, checkpoint_dir=None, resume=True,
        progress=None, seed=None) -> History:
    """Train ``net`` and return a :class:`~gluondist.callbacks.History`.

    ``train_data``/``val_data``: an ``(X, y)`` tuple of numpy arrays or NDArrays, a
    ``gluon.data.Dataset`` or a ``DataLoader``. ``batch_size`` is per worker (default: the
    DataLoader's, else 32); it is split across the devices ``ctx`` (see
    :func:`gluondist.parallel.contexts`). Under ``gluondist launch`` each of N workers takes its
    slice of every global batch of ``batch_size * N``, so the job computes what one process with
    that batch would. ``loss=None`` is softmax cross-entropy. ``optimizer_params`` goes to the
    optimizer, plus ``clip_global_norm`` (clip the mean gradient to this 2-norm).

    ``checkpoint_dir``: after each epoch worker 0 writes parameters, trainer state, epoch and
    history atomically; with ``resume`` a later call continues after the last complete epoch.
    ``seed`` makes the run reproducible (the same on one or several devices or workers).
    ``progress``: True/False, or None for a bar only when interactive (else a log line).

    Raises ValueError before training for inconsistent or unusable input."""
    ctxs = parallel.contexts(ctx)
    kind = kvs.resolve_kind(kvstore, len(ctxs))
    train, loader_batch = source(train_data, "train_data")
    val = source(val_data, "val_data")[0] if val_data is not None else None
    workers = kvs.num_workers() if kind in kvs.DIST_KINDS else 1
    if batch_size is None:  # Keras' default, but never more than each worker's share
        batch_size = loader_batch or max(1, min(32, len(train) // workers))
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"epochs must be a non-negative integer, not {epochs!r}")
    if batch_size * workers > len(train):
        raise ValueError(f"batch_size {batch_size} x {workers} worker(s) exceeds the "
                         f"{len(train)} training samples; lower batch_size")
    opt_params, clip = _check_optimizer(optimizer, optimizer_params)
    metric_list = _metrics(metrics)
    loss = loss or mx.gluon.loss.SoftmaxCrossEntropyLoss()
    callbacks = list(callbacks or [])

    if seed is not None:
        mx.random.seed(int(seed))
    sample_data, sample_label = train.load(np.arange(1), ctxs[:1])
    parallel.initialize(net, ctxs)
    try:
        out = net(sample_data[0])
    except Exception as exc:
        raise ValueError(f"net cannot take a sample of train_data: {exc}".splitlines()[0]) \
            from None
    _check_labels(loss, out, train, "train_data")
    if val is not None:
        _check_labels(loss, out, val, "val_data")

    state = None
    if checkpoint_dir is not None:
        try:
            os.makedirs(checkpoint_dir, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"checkpoint_dir {checkpoint_dir}: {exc.strerror}") from None
        if not os.access(checkpoint_dir, os.W_OK | os.X_OK):
            raise ValueError(f"checkpoint_dir {checkpoint_dir} is not writable")
        state = checkpoint.load_latest(checkpoint_dir) if resume else None
        if state is not None and state["signature"] != _signature(net):
            raise ValueError(f"checkpoint_dir {checkpoint_dir} holds a checkpoint of a different "
                             "model; pass another directory, or resume=False to start over")
        if state is not None:
            _set_params(net, state["params"])
            seed = state["seed"]
            random.setstate(state["rng"]["python"])  # for user code that draws from them
            np.random.set_state(state["rng"]["numpy"])

    kv = kvs.create(kind, len(ctxs)) if kind is not None else None
    dist = kv is not None and "dist" in kv.type
    async_mode = dist and "async" in kv.type
    # Sums over workers go through the servers, which in async mode apply the optimizer to
    # every push: there each worker reports its own metrics and stops on its own.
    agree = dist and not async_mode
    rank, workers = (kv.rank, kv.num_workers) if dist else (0, 1)
    if seed is None:
        seed = _job_seed() if dist else random.SystemRandom().randrange(2 ** 31)
    start = state["epoch"] + 1 if state is not None else 0
    if agree:
        total, squares = kvs.allreduce([start, start * start])
        if workers * squares != total * total:
            raise RuntimeError("workers found different checkpoints in checkpoint_dir: it must "
                               "be one directory that every worker sees (a shared filesystem)")
    trainer = kvs.make_trainer(net.collect_params(), optimizer, opt_params or None, kv or kind,
                               len(ctxs), batch_size)
    if state is not None and state.get("trainer") is not None:
        _load_trainer_states(trainer, state["trainer"], checkpoint_dir)

    history = History({k: list(v) for k, v in state["history"].items()} if state else None)
    run = Run(net, trainer, history)
    sampler = kvs.ShardedBatchSampler(len(train), batch_size, workers, rank, seed=seed)
    show_bar = rank == 0 and (progress if progress is not None else _interactive())
    wants_batch_logs = any(type(cb).on_batch_end is not Callback.on_batch_end for cb in callbacks)

    for cb in callbacks:
        cb.on_train_begin(run)
    for epoch in range(start, epochs):
        run.epoch = epoch
        sampler.set_epoch(epoch)
        # Re-seed per epoch (rank apart) so dropout and friends replay alike after a resume.
        mx.random.seed((seed * 1000003 + epoch * 9973 + rank) % (2 ** 31))
        for cb in callbacks:
            cb.on_epoch_begin(run, epoch)
        for m in metric_list:
            m.reset()
        loss_sums, count = {}, 0
        bar = _bar(len(sampler), epoch, epochs) if show_bar else None
        for batch, (idx, global_count) in enumerate(sampler.batches()):
            empty = len(idx) == 0  # this worker's share of a tiny last batch: push zeros
            data, label = train.load(idx if not empty else np.arange(1), ctxs)
            # In async mode each worker's gradient is applied alone with a fixed rescale, so
            # a short batch is rescaled through the loss instead.
            scale = 0.0 if empty else (batch_size / len(idx) if async_mode else 1.0)
            outputs, losses = parallel.forward_backward(net, loss, data, label, ctxs, scale)
            _step(trainer, ctxs, batch_size if async_mode else global_count, clip, async_mode)
            heartbeat.beat()  # issue 9's progress channel; the callback version replaces this
            if not empty:
                for i, l in enumerate(losses):  # read once per epoch, not per batch
                    if l is not None:
                        _accumulate(loss_sums, i, l.sum())
                count += len(idx)
                for m in metric_list:
                    m.update(label, outputs)
            if bar is not None:
                bar.update(1)
            if wants_batch_logs:
                batch_loss = sum(float(l.sum().asscalar()) for l in losses if l is not None)
                logs = {"batch": batch, "size": len(idx),
                        "loss": batch_loss / len(idx) if not empty else float("nan")}
                for cb in callbacks:
                    cb.on_batch_end(run, batch, logs)
            if run.stop_training and not agree:
                break
        loss_sum = sum(float(l.asscalar()) for l in loss_sums.values())
        logs = _reduce({"loss": (loss_sum, count)}, metric_list, agree)
        if val is not None:
            logs.update({f"val_{k}": v for k, v in
                         _evaluate(net, loss, val, metric_list, ctxs, batch_size,
                                   workers if agree else 1, rank if agree else 0,
                                   agree).items()})
        history.append(epoch, logs)
        if bar is not None:
            bar.set_postfix({k: f"{v:.4g}" for k, v in logs.items()})
            bar.close()
        elif rank == 0:
            log.info("epoch %d/%d: %s", epoch + 1, epochs,
                     "  ".join(f"{k}={v:.4f}" for k, v in logs.items()))
        for cb in callbacks:
            cb.on_epoch_end(run, epoch, logs)
        if checkpoint_dir is not None and rank == 0:
            checkpoint.save(checkpoint_dir, epoch, {
                "signature": _signature(net), "params": _get_params(net), "seed": seed,
                "trainer": None if async_mode else _trainer_states(trainer, checkpoint_dir),
                "history": history.history, "rng": {"python": random.getstate(),
                                                    "numpy": np.random.get_state()}})
        if agree:
            run.stop_training = kvs.allreduce([float(run.stop_training)])[0] > 0
        if run.stop_training:
            break
    for cb in callbacks:
        cb.on_train_end(run)
    mx.nd.waitall()
    return history


def _step(trainer, ctxs, batch_size, clip, async_mode):
    if clip is None:
        trainer.step(batch_size)
    elif async_mode:  # the servers update: clip this worker's own gradient before it goes
        _clip_local(trainer, ctxs, clip * batch_size)
        trainer.step(batch_size)
    else:
        trainer.allreduce_grads()
        parallel.clip_global_norm(trainer, ctxs, clip * batch_size)  # grads are sums here
        trainer.update(batch_size)


def _clip_local(trainer, ctxs, max_norm):
    params = [p for p in trainer._params if p.grad_req != "null"]
    sums = [mx.nd.add_n(*[p.grad(c).as_in_context(ctxs[0]) for c in ctxs]) for p in params]
    norm = float(mx.nd.sqrt(mx.nd.add_n(*[(g * g).sum() for g in sums])).asscalar())
    if norm > max_norm:
        for p in params:
            for c in ctxs:
                p.grad(c)[:] *= max_norm / norm


def _reduce(sums: Dict[str, tuple], metric_list, dist: bool) -> Dict[str, float]:
    """Mean of each value over all samples of all workers."""
    pairs = list(sums.items()) + [(m.name, m.sums()) for m in metric_list]
    flat = [x for _, pair in pairs for x in pair]
    if dist:
        flat = kvs.allreduce(flat)
    return {name: (flat[2 * i] / flat[2 * i + 1] if flat[2 * i + 1] else float("nan"))
            for i, (name, _) in enumerate(pairs)}


def _evaluate(net, loss, val, metric_list, ctxs, batch_size, workers, rank, dist):
    """Loss and metrics over the whole validation set, each worker taking its share."""
    for m in metric_list:
        m.reset()
    sampler = kvs.ShardedBatchSampler(len(val), batch_size, workers, rank, shuffle=False)
    loss_sum, count = 0.0, 0
    for idx, _ in sampler.batches():
        if len(idx) == 0:
            continue
        data, label = val.load(idx, ctxs)
        data = [d for d in data if d is not None]
        label = [l for l in label if l is not None]
        outputs = [net(d) for d in data]
        loss_sum += sum(float(loss(o, l).sum().asscalar()) for o, l in zip(outputs, label))
        count += len(idx)
        for m in metric_list:
            m.update(label, outputs)
    return _reduce({"loss": (loss_sum, count)}, metric_list, dist)


def _check_labels(loss, out, src, name):
    if not isinstance(loss, mx.gluon.loss.SoftmaxCrossEntropyLoss) or src.labels is None:
        return
    if not getattr(loss, "_sparse_label", True):
        return
    classes = out.shape[-1]
    labels = np.asarray(src.labels)
    low, high = labels.min(), labels.max()
    if low < 0 or high >= classes or not np.all(np.equal(np.mod(labels, 1), 0)):
        raise ValueError(f"{name} has labels from {low:g} to {high:g} but the net outputs "
                         f"{classes} classes (labels must be integers 0..{classes - 1})")


def _get_params(net) -> Dict[str, np.ndarray]:
    return {name: p.data(p.list_ctx()[0]).asnumpy()
            for name, p in net._collect_params_with_prefix().items()}


def _set_params(net, values: Dict[str, np.ndarray]) -> None:
    for name, p in net._collect_params_with_prefix().items():
        p.set_data(mx.nd.array(values[name], dtype=values[name].dtype))


def _trainer_states(trainer, directory) -> bytes:
    # Trainer only saves to a file name: go through a temporary file beside the checkpoint.
    tmp = os.path.join(directory, f".trainer.{os.getpid()}.tmp")
    trainer.save_states(tmp)
    try:
        with open(tmp, "rb") as f:
            return f.read()
    finally:
        os.unlink(tmp)


def _load_trainer_states(trainer, blob: bytes, directory) -> None:
    tmp = os.path.join(directory, f".trainer.{os.getpid()}.load.tmp")
    with open(tmp, "wb") as f:
        f.write(blob)
    try:
        trainer.load_states(tmp)
    finally:
        os.unlink(tmp)


def _interactive() -> bool:
    return "ipykernel" in sys.modules or sys.stderr.isatty()


def _bar(total, epoch, epochs):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=f"epoch {epoch + 1}/{epochs}", leave=True)
