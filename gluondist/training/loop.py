"""``gluondist.fit``: train a Gluon model in a notebook, on several devices, or as one worker of a
launched parameter-server job, with the same call."""
from __future__ import annotations

import hashlib
import math
import os
import random
import sys
import time
import zlib
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from .. import checkpoint, envvars, kvstore as kvs, parallel
from . import timing
from .._mx import mx
from .arguments import check_callbacks, check_optimizer, checkpoint_dir_of, seed_all
from .callbacks import (Callback, CallbackList, Checkpointer, EpochLogger, Heartbeat,
                        History, ProgressBar, StopAgreement)
from .data import check_count, check_not_all_dropped, source
from .evaluation import SHARD_HINT, differences, run_pass
from ..kv.kinds import Mode
from .objective import Tally, check_batch, check_float32

# One process reads the losses of 8 batches in one host sync per device: the device runs that
# far ahead without waiting, and a NaN is still named within 8 batches of where it appeared.
NAN_READ_EVERY = 8


@dataclass(eq=False)
class Run:
    """The state of one fit call, as callbacks see it. The public fields are the callback API
    (see :class:`gluondist.Callback`); those with ``_`` are fit's own."""

    net: object
    trainer: object
    history: History
    callbacks: CallbackList
    epochs: int
    start: int  # the first epoch this call trains (after a resume, the one after the checkpoint)
    steps: int  # batches per epoch on every worker
    rank: int
    num_workers: int
    seed: int
    mode: Optional[Mode]  # the kvstore's (None without one)
    _step: kvs.TrainStep
    _sampler: kvs.ShardedBatchSampler
    _config: "FitConfig"
    _terminate_on_nan: bool
    epoch: int = field(init=False)
    stop_training: bool = False

    def __post_init__(self):
        self.epoch = self.start

    @property
    def agree(self) -> bool:
        """The workers step together and agree on stops, metrics and checkpoints."""
        return self.mode is not None and self.mode.needs_agreement

    @property
    def updates_on_servers(self) -> bool:
        """``dist_async``: the servers run the optimizer and hold its state."""
        return self.mode is not None and self.mode.updates_on_servers


def fit(net, train_data, loss=None, optimizer="sgd", optimizer_params=None, epochs=1,
        batch_size=None, ctx=None, kvstore="auto", val_data=None, metrics="auto",
        callbacks: Optional[Sequence[Callback]] = None, checkpoint_dir=None, resume=True,
        progress=None, seed=None, terminate_on_nan=True, accumulate=1, loss_weights=None,
        class_weight=None) -> History:
    """Train ``net`` and return a :class:`~gluondist.training.callbacks.History`.

    ``train_data``/``val_data``: an ``(X, y)`` tuple of numpy arrays or NDArrays, a
    ``gluon.data.Dataset`` or a ``DataLoader``. ``batch_size`` is per worker (default: the
    DataLoader's, else 32); it is split across the devices ``ctx`` (see
    :func:`gluondist.parallel.contexts`). Under ``gluondist launch`` each of N workers takes its
    slice of every global batch of ``batch_size * N``, so the job computes what one process with
    that batch would. ``loss=None`` is softmax cross-entropy; ``metrics='auto'`` is accuracy for
    outputs trained with it, none for others. ``optimizer_params`` goes to the
    optimizer, plus ``clip_global_norm`` (clip the mean gradient to this 2-norm).

    ``checkpoint_dir``: after each epoch worker 0 writes a checkpoint (see
    :mod:`gluondist.checkpoint`); with ``resume`` a later call continues after the last complete
    epoch, and ``resume=False`` starts a fresh run there. ``seed`` makes the run reproducible.
    ``progress``: True/False, or None for a bar only when interactive (else a log line).
    ``terminate_on_nan``: a NaN or infinite training loss raises FloatingPointError.
    ``accumulate=k``: one update every k batches with the sum of their gradients (as a batch
    k times larger). Several inputs or outputs: ``((X1, X2), (y1, y2))``, ``loss=[l1, l2]``,
    ``loss_weights``, ``metrics={output: names}``. ``(X, y, sample_weight)`` and
    ``class_weight={label: weight}`` weight each sample's loss. Inputs, labels and weights are
    cast to float32 (the net must be float32); ``optimizer_params`` and an optimizer instance
    are copied, never changed.

    Raises ValueError before training for inconsistent or unusable input (in a ``dist_sync``
    job also when the workers' sample counts or settings differ). When training raises
    (Ctrl-C included), each callback's ``on_exception`` runs instead of ``on_train_end``, fit's
    data thread is stopped and the error re-raised; checkpoints written stay as they are."""
    config = _prepare(net=net, train_data=train_data, loss=loss, optimizer=optimizer,
                      optimizer_params=optimizer_params, epochs=epochs, batch_size=batch_size,
                      ctx=ctx, kvstore=kvstore, val_data=val_data, metrics=metrics,
                      callbacks=callbacks, checkpoint_dir=checkpoint_dir, seed=seed,
                      accumulate=accumulate, loss_weights=loss_weights,
                      class_weight=class_weight)
    run = _start(config, resume, progress, terminate_on_nan)
    try:
        _epochs(run)
    except BaseException as exc:  # Ctrl-C included: callbacks close what they opened
        run.callbacks.on_exception(run, exc)
        raise
    run.callbacks.on_train_end(run)
    mx.nd.waitall()
    return run.history


def _epochs(run: Run) -> None:
    run.callbacks.on_train_begin(run)  # may stop at once (a resumed run that had ended)
    for epoch in range(run.start, run.epochs if not run.stop_training else run.start):
        run.epoch = epoch
        run.callbacks.on_epoch_begin(run, epoch)
        logs = _train_epoch(run, epoch)
        run._step.average_untrained()  # BatchNorm statistics: one value on every copy
        if run._terminate_on_nan:
            _check_parameters(run)
        if run._config.val is not None:
            logs.update({f"val_{k}": v for k, v in _evaluate(run).items()})
        run.callbacks.on_epoch_end(run, epoch, logs)
        if run.stop_training:
            break


@dataclass(frozen=True, eq=False)
class FitConfig:
    """What fit checked before anything trains."""

    net: object
    ctxs: list
    mode: Optional[Mode]
    train: object  # a data.Source
    val: object  # a data.Source, or None
    batch_size: int
    val_batch: int
    epochs: int
    optimizer: object
    opt_params: Optional[dict]
    clip: Optional[float]
    objective: object  # an objective.Objective
    callbacks: list
    checkpoint_dir: Optional[str]
    seed: Optional[int]
    accumulate: int


def _prepare(*, net, train_data, loss, optimizer, optimizer_params, epochs, batch_size, ctx,
             kvstore, val_data, metrics, callbacks, checkpoint_dir, seed, accumulate,
             loss_weights, class_weight) -> FitConfig:
    """Check every argument and one batch of each data source; initialise the net."""
    ctxs = parallel.contexts(ctx)
    if kvstore is None and len(ctxs) > 1:
        raise ValueError(f"kvstore=None on {len(ctxs)} devices would train each device's copy "
                         "of the net on its own part of the batch (the copies drift apart); "
                         "use kvstore='auto' or 'device', or one device")
    mode = kvs.resolve_mode(kvstore, len(ctxs))
    workers = kvs.num_workers() if mode is not None and mode.distributed else 1
    train, val, batch_size, val_batch = _sources(train_data, val_data, batch_size, workers,
                                                 class_weight)
    check_count(epochs, "epochs", 0)
    check_count(accumulate, "accumulate", 1)
    optimizer, opt_params, clip = check_optimizer(optimizer, optimizer_params)
    callbacks = check_callbacks(callbacks)
    checkpoint_dir = checkpoint_dir_of(checkpoint_dir, callbacks)
    if seed is not None:
        seed_all(seed)
    check_float32(net)
    parallel.initialize(net, ctxs)
    objective = check_batch(net, None, train, "train_data", ctxs[0], batch_size, loss,
                            loss_weights, metrics, class_weight)
    if val is not None:
        check_batch(net, objective, val, "val_data", ctxs[0], val_batch)
    keys = objective.keys()
    keys += [f"val_{k}" for k in keys] if val is not None else []
    for cb in callbacks:
        cb.check(keys)
    return FitConfig(net=net, ctxs=ctxs, mode=mode, train=train, val=val, batch_size=batch_size,
                 val_batch=val_batch, epochs=epochs, optimizer=optimizer, opt_params=opt_params,
                 clip=clip, objective=objective, callbacks=callbacks,
                 checkpoint_dir=checkpoint_dir, seed=seed, accumulate=accumulate)


def _sources(train_data, val_data, batch_size, workers: int, class_weight):
    """``(train, val, batch_size, val_batch)``: validation keeps its DataLoader's batch size
    (else the training one), as evaluate does."""
    train, loader_batch = source(train_data, "train_data", class_weight)
    # as Keras: no class_weight in validation, so that evaluate() gives the same figures
    val, val_batch = source(val_data, "val_data") if val_data is not None else (None, None)
    if batch_size is None:  # Keras' default, but never more than each worker's share
        batch_size = loader_batch or max(1, min(32, len(train) // workers))
    check_count(batch_size, "batch_size", 1)
    if batch_size * workers > len(train):
        raise ValueError(f"batch_size {batch_size} x {workers} worker(s) exceeds the "
                         f"{len(train)} training samples; lower batch_size")
    if val is not None:
        check_not_all_dropped(val, val_batch or batch_size, workers, "val_data")
    return train, val, batch_size, val_batch or batch_size


def _start(cfg: FitConfig, resume: bool, progress, terminate_on_nan: bool) -> Run:
    """Restore from a checkpoint, join the job's kvstore, make the trainer: ready to train."""
    net, ctxs, seed = cfg.net, cfg.ctxs, cfg.seed
    ckpt = _restore(cfg, resume)
    if ckpt is not None:
        seed = ckpt.state.seed
    kv = kvs.create(cfg.mode, len(ctxs)) if cfg.mode is not None else None
    distributed = cfg.mode is not None and cfg.mode.distributed
    rank, workers = (kv.rank, kv.num_workers) if distributed else (0, 1)
    if seed is None:
        seed = _job_seed() if distributed else random.SystemRandom().randrange(2 ** 31)
    start = ckpt.epoch + 1 if ckpt is not None else 0
    trainer = kvs.make_trainer(net.collect_params(), cfg.optimizer, cfg.opt_params or None,
                               kv, len(ctxs), cfg.batch_size * cfg.accumulate)
    step = kvs.TrainStep(trainer, kv, ctxs, cfg.batch_size, cfg.clip, cfg.accumulate)
    if step.agree:
        _agree(cfg, start)
    callbacks = _callback_list(cfg, progress)
    sampler = kvs.ShardedBatchSampler(len(cfg.train), cfg.batch_size, workers, rank, seed=seed,
                                      last_batch=cfg.train.last_batch)
    run = Run(net=net, trainer=trainer, history=callbacks.first(History), callbacks=callbacks,
              epochs=cfg.epochs, start=start, steps=len(sampler), rank=rank,
              num_workers=workers, seed=seed, mode=cfg.mode, _step=step, _sampler=sampler,
              _config=cfg, _terminate_on_nan=terminate_on_nan)
    if ckpt is not None:
        checkpoint.restore_trainer(ckpt, trainer)
        ckpt.state.apply(run, ckpt.callback_arrays)
    return run


def _agree(cfg: FitConfig, start: int) -> None:
    """Fail on every worker of a dist_sync job, before any batch, when the workers would run
    different numbers of batches (they would hang in push) or resume different epochs."""
    differ = differences({"train_data samples": len(cfg.train),
                          "val_data samples": len(cfg.val) if cfg.val is not None else -1})
    # equal counts, other rows: shards of equal size (one allreduce more, before any batch)
    differ = differ or differences({"train_data rows (a checksum)": cfg.train.fingerprint()})
    if differ:
        raise ValueError(f"the workers hold different data ({differ}); {SHARD_HINT}")
    last = {"keep": 0, "discard": 1}
    differ = differences({"batch_size": cfg.batch_size, "val batch size": cfg.val_batch,
                          "epochs": cfg.epochs, "accumulate": cfg.accumulate,
                          "seed (-1: none)": -1 if cfg.seed is None else cfg.seed,
                          "last_batch (0: keep, 1: discard)": last[cfg.train.last_batch],
                          "val last_batch (0: keep, 1: discard)":
                              last[cfg.val.last_batch] if cfg.val is not None else -1,
                          "optimizer and its settings (a checksum)": _settings_digest(cfg)})
    if differ:
        raise ValueError(f"the workers called fit with different settings ({differ}); every "
                         "worker must make the same fit call")
    if differences({"resumed epoch": start}):
        raise RuntimeError("workers found different checkpoints in checkpoint_dir: it must "
                           "be one directory that every worker sees (a shared filesystem)")


def _settings_digest(cfg: FitConfig) -> int:
    """A checksum of the optimizer, its settings and clip_global_norm (24 bits, exact in
    any float): workers whose optimizers differ would train apart without a word."""
    def plain(value, depth=0):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, dict) and depth < 2:
            return sorted((str(k), plain(v, depth + 1)) for k, v in value.items())
        if isinstance(value, (list, tuple)) and depth < 2:
            return [plain(v, depth + 1) for v in value]
        if depth < 1 and hasattr(value, "__dict__"):  # an optimizer, an lr_scheduler
            return [type(value).__name__, plain({k: v for k, v in vars(value).items()
                                                 if not k.startswith("_")}, depth + 1)]
        return type(value).__name__  # what differs across processes (addresses) stays out
    text = repr([plain(cfg.optimizer), plain(cfg.opt_params), cfg.clip])
    return zlib.crc32(text.encode()) % (1 << 24)


def _restore(cfg: FitConfig, resume: bool) -> Optional[checkpoint.Checkpoint]:
    """Load the newest checkpoint of this run into the net (every worker reads it)."""
    directory = cfg.checkpoint_dir
    if directory is None:
        return None
    if not resume:
        if kvs.rank() == 0:
            checkpoint.start_fresh(directory)
        return None
    ckpt = checkpoint.load_latest(directory)
    if ckpt is None:
        return None
    if ckpt.state.signature != checkpoint.signature(cfg.net):
        raise ValueError(f"checkpoint_dir {directory} holds a checkpoint of a different model "
                         f"({ckpt.path.name}); pass a directory of its own, or resume=False to "
                         "start a fresh run there (the old checkpoints are then never resumed)")
    checkpoint.restore_net(ckpt, cfg.net)
    return ckpt


def _callback_list(cfg: FitConfig, progress) -> CallbackList:
    """The user's callbacks with fit's own around them, unless the user passed their kind:
    the bar or log line first, then the user's, the stop agreement (a job's workers agree on
    the user's stop requests), History, the heartbeat, the checkpoint last (so it records what
    every other callback did this epoch)."""
    mine = [cb for cb in cfg.callbacks if not isinstance(cb, Checkpointer)]
    has = lambda kind: any(isinstance(cb, kind) for cb in mine)
    before, after = [], [StopAgreement()]
    if not has(ProgressBar) and not has(EpochLogger):
        before.append(ProgressBar() if (progress if progress is not None else _interactive())
                      else EpochLogger())
    if not has(History):
        after.append(History())
    if not has(Heartbeat):
        after.append(Heartbeat())
    if cfg.checkpoint_dir is not None:  # the user's (see _checkpoint_dir), or fit's own
        after.append(next((cb for cb in cfg.callbacks if isinstance(cb, Checkpointer)),
                          None) or Checkpointer(cfg.checkpoint_dir))
    return CallbackList(before + mine + after)


def _train_epoch(run: Run, epoch: int) -> dict:
    """One pass over this worker's share of the training data; returns the epoch's logs."""
    started = time.perf_counter()
    run._sampler.set_epoch(epoch)
    mx.random.seed(epoch_seed(run.seed, epoch, run.rank))
    tally = Tally(run._config.objective)
    # A worker of a job checks each batch before its push, so no other worker ever receives
    # the NaN; one process reads the losses of several batches at once, without stalling.
    watch = _NanWatch(run, every=1 if run._step.distributed else NAN_READ_EVERY) \
        if run._terminate_on_nan else None
    hooks, clock = run.callbacks.batch_hooks, timing.EpochClock(run.steps)
    source = run._config.train.epoch(run._sampler, run._config.ctxs)
    with closing(source):  # an error stops its thread
        samples = _train_batches(run, clock.waiting(source), tally, watch, clock, hooks)
    if watch is not None:
        watch.check()
    run._step.flush()  # a last, partial accumulation
    seconds = time.perf_counter() - started
    logs = tally.logs(kvs.allreduce if run.agree else None)
    logs.update(epoch_seconds=seconds, samples_per_s=samples / seconds)
    split = clock.split(seconds)
    if run.agree and run.num_workers > 1:
        split = timing.over_workers(split, kvs.allgather)
    logs.update(split)
    return logs


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """MXNet's seed for ``epoch`` on worker ``rank``: set anew every epoch, so dropout and
    friends replay alike after a resume; independent streams per epoch and rank."""
    return int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1)[0]) % (2 ** 31)


def _train_batches(run: Run, batches, tally, watch, clock, hooks) -> int:
    """Train on each batch of the epoch; returns the number of samples (of all workers)."""
    samples = 0
    for batch, (n, global_count, data, targets) in enumerate(batches):
        timed = clock.sample(batch)
        outputs, losses = parallel.forward_backward(run.net, run._config.objective, data,
                                                    targets, run._config.ctxs,
                                                    run._step.loss_scale(n))
        batch_sums = tally.add(outputs, targets, losses) if n else []
        if watch is not None:
            watch.add(batch, batch_sums)
        if timed is not None:
            timed.lap("compute")
        run._step(global_count, timed)
        samples += global_count
        if hooks:
            run.callbacks.on_batch_end(run, batch, _BatchLogs(batch, n, batch_sums))
    return samples


def _evaluate(run: Run) -> dict:
    """Loss and metrics over all of the validation data; in dist_sync each worker its share."""
    c = run._config
    if run.agree:
        return run_pass(run.net, c.objective, c.val, c.ctxs, c.val_batch, run.rank,
                        run.num_workers, kvs.allreduce)
    return run_pass(run.net, c.objective, c.val, c.ctxs, c.val_batch)


def _check_parameters(run: Run) -> None:
    """NaN in a Dataset's samples can hide from the loss (relu passes a NaN weight's column
    as 0) while the weights turn NaN: check them once per epoch, before any checkpoint."""
    bad = [name for name, p in run.net._collect_params_with_prefix().items()
           if not math.isfinite(float(p.data(run._config.ctxs[0]).norm().asscalar()))]
    if bad:
        raise FloatingPointError(
            f"parameter(s) {', '.join(bad[:3])} became NaN or infinite in epoch "
            f"{run.epoch + 1}/{run.epochs}: the data likely holds NaN or infinity (only arrays "
            "are checked before training) or the learning rate is too high; checkpoints of "
            "earlier epochs are kept")


class _NanWatch:
    """Finds the first batch whose training loss is NaN or infinite, reading the loss sums of
    ``every`` batches with one host sync per device."""

    def __init__(self, run: Run, every: int):
        self.run, self.every, self.pending = run, every, []

    def add(self, batch: int, batch_sums) -> None:
        self.pending.append((batch, batch_sums))
        if len(self.pending) >= self.every:
            self.check()

    def check(self) -> None:
        totals = np.zeros(len(self.pending))
        by_context = {}
        for k, (_, sums) in enumerate(self.pending):
            for i, value in sums:
                by_context.setdefault(i, []).append((k, value))
        for items in by_context.values():
            values = mx.nd.concat(*[v.reshape((1,)) for _, v in items], dim=0).asnumpy()
            for (k, _), value in zip(items, values):
                totals[k] += value
        batches = [batch for batch, _ in self.pending]
        self.pending = []
        bad = np.flatnonzero(~np.isfinite(totals))
        if bad.size:
            run, where = self.run, f" on worker {self.run.rank}" if self.run.num_workers > 1 else ""
            raise FloatingPointError(
                f"training loss is {totals[bad[0]]} in epoch {run.epoch + 1}/{run.epochs}, batch "
                f"{batches[bad[0]] + 1}/{run.steps}{where}: training stopped (checkpoints of "
                "earlier epochs are kept); look for extreme values in the data or lower the "
                "learning rate, or pass terminate_on_nan=False to train on")


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


def _job_seed() -> int:
    """A seed every worker of this job derives alike (it differs from job to job)."""
    job = f"{os.environ.get(envvars.DMLC_PS_ROOT_URI)}:{os.environ.get(envvars.DMLC_PS_ROOT_PORT)}"
    return int(hashlib.sha256(job.encode()).hexdigest()[:8], 16) % (2 ** 31)


def _interactive() -> bool:
    return "ipykernel" in sys.modules or sys.stderr.isatty()
