"""``gluondist.fit``: train a Gluon model in a notebook, on several devices, or as one worker of a
launched parameter-server job, with the same call."""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from contextlib import closing
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from .. import elastic, kvstore as kvs, parallel, snapshot, syncbn
from .. import _mx
from .._mx import mx
from ..kv.sampling import MXNET, derive_seed
from ..parallel import Contexts
from . import timing
from .arguments import Data, FitArgs, Losses, Metrics, PathLike
from .callbacks import Callback, History
from .config import prepare
from .console import say
from .evaluation import run_pass
from .objective import Tally
from .run import LoopState, Run, start

log = logging.getLogger(__name__)

# One process reads the losses of 8 batches in one host sync per device: the device runs that
# far ahead without waiting, and a NaN is still named within 8 batches of where it appeared.
NAN_READ_EVERY = 8


# The arguments' names, order, defaults and types are FitArgs' (tests/unit/test_fit_args.py checks
# it); they are written out here so that IDEs and help() show them.
def fit(net: mx.gluon.Block, train_data: Data, loss: Optional[Losses] = None,
        optimizer: Union[str, mx.optimizer.Optimizer] = "sgd",
        optimizer_params: Optional[dict] = None, epochs: int = 1,
        batch_size: Optional[int] = None, ctx: Contexts = None, kvstore: Optional[str] = "auto",
        val_data: Optional[Data] = None, metrics: Metrics = "auto",
        callbacks: Optional[Sequence[Callback]] = None,
        checkpoint_dir: Optional[PathLike] = None, resume: bool = True,
        progress: Optional[bool] = None, seed: Optional[int] = None,
        terminate_on_nan: bool = True, accumulate: int = 1,
        loss_weights: Optional[Sequence[float]] = None,
        class_weight: Optional[Dict[int, float]] = None, parallel: str = "data",
        micro_batches: int = 1, stages: Optional[Sequence[int]] = None,
        compression: Union[None, str, dict] = None,
        checkpoint_every: Optional[int] = None, sync_batchnorm: bool = False) -> History:
    """Train ``net`` and return a :class:`~gluondist.training.callbacks.History`.

    ``train_data``/``val_data``: an ``(X, y)`` tuple of numpy arrays or NDArrays, a
    ``gluon.data.Dataset`` or a ``DataLoader``. ``batch_size`` is per worker (default: the
    DataLoader's, else :data:`~gluondist.training.arguments.DEFAULT_BATCH_SIZE`); it is split
    across the devices ``ctx`` (see :func:`gluondist.parallel.contexts`). Under
    ``gluondist launch`` each of N workers takes its slice of every global batch of
    ``batch_size * N``, so the job computes what one process with that batch would.
    ``loss=None`` is softmax cross-entropy; ``metrics='auto'`` is accuracy for outputs trained
    with it, none for others. ``optimizer_params`` goes to the optimizer, plus
    ``clip_global_norm`` (clip the mean gradient to this 2-norm; under ``dist_async``, where
    there is no global gradient at step time, each worker's own gradient before it is pushed).

    ``checkpoint_dir``: after each epoch worker 0 writes a checkpoint (see
    :mod:`gluondist.checkpoint`), and every ``checkpoint_every`` optimizer steps if given,
    while training goes on; with ``resume`` a later call continues from the newest (saying
    in one line from which epoch and batch), and ``resume=False`` starts a fresh run there.
    An elastic job resizes at the next checkpoint (docs/long-jobs.md). ``seed`` makes
    the run reproducible. ``progress``: True a bar, False nothing, None (the default) a bar in
    a terminal or notebook, else one line per epoch: logged at INFO on the ``gluondist`` logger,
    and on stderr too when logging would not show it (worker 0 only). ``epochs=0`` trains
    nothing and returns an empty History.
    ``accumulate=k``: one update every k batches with the sum of their gradients. Several
    inputs or outputs: ``((X1, X2), (y1, y2))``, ``loss=[l1, l2]``, ``loss_weights``,
    ``metrics={output: names}``. ``parallel='pipeline'``: docs/pipeline.md. ``compression``:
    gradients sent as float16 (``'fp16'``) or MXNet's 2-bit in a ``dist_sync`` job.
    ``sync_batchnorm``: BatchNorm statistics of the global batch (see
    :func:`gluondist.syncbn.sync_batchnorm`), the net's own layers back when fit ends. Inputs,
    labels and weights are cast to float32 (the net must be float32); ``optimizer_params`` and
    an optimizer instance are copied, never changed. Every argument, its default and meaning:
    the table in docs/fit.md, from :class:`~gluondist.training.arguments.FitArgs`.

    Raises ValueError before training for inconsistent or unusable input (in a ``dist_sync``
    job also when the workers' sample counts or settings differ). When training raises
    (Ctrl-C included), each callback's ``on_exception`` runs instead of ``on_train_end``, fit's
    data thread is stopped and the error re-raised; checkpoints written stay as they are."""
    return _fit(FitArgs(
        net=net, train_data=train_data, loss=loss, optimizer=optimizer,
        optimizer_params=optimizer_params, epochs=epochs, batch_size=batch_size, ctx=ctx,
        kvstore=kvstore, val_data=val_data, metrics=metrics, callbacks=callbacks,
        checkpoint_dir=checkpoint_dir, resume=resume, progress=progress, seed=seed,
        terminate_on_nan=terminate_on_nan, accumulate=accumulate, loss_weights=loss_weights,
        class_weight=class_weight, parallel=parallel, micro_batches=micro_batches,
        stages=stages, compression=compression, checkpoint_every=checkpoint_every,
        sync_batchnorm=sync_batchnorm))


def _fit(args: FitArgs) -> History:
    """fit of ``args``; with ``sync_batchnorm``, the net's BatchNorm layers, converted for the
    run, back in place however it ends (so the net exports: see plain_batchnorm)."""
    try:
        return _train(start(prepare(args)))
    finally:
        if args.sync_batchnorm:
            syncbn.plain_batchnorm(args.net)


def _train(loop: LoopState) -> History:
    """fit's epochs, then its callbacks' end (or, when training raises, their on_exception)."""
    run = loop.run
    try:
        _grow_if_asked(run, _epochs(loop))
    except BaseException as exc:  # Ctrl-C included: callbacks close what they opened
        run.callbacks.on_exception(run, exc)
        raise
    run.callbacks.on_train_end(run)
    mx.nd.waitall()
    return run.history


def _grow_if_asked(run, mid_epoch: int) -> None:
    """The launcher of an elastic job asked for more workers: the checkpoint of the epoch (or
    of its first ``mid_epoch`` batches) is taken, so leave (elastic.EXIT; the write is
    completed first) and the launcher starts the job again, larger; after the last epoch
    there is nothing to grow for."""
    if run.resizing and not run.stop_training and (mid_epoch or run.epoch + 1 < run.epochs):
        if run.rank == 0:
            where = f"epoch {run.epoch + 1}" + (f", batch {mid_epoch}" if mid_epoch else "")
            say(log, f"fit: stopping after the checkpoint of {where}: the launcher "
                     "restarts the job on the hosts it finds then, which resumes from it")
        raise SystemExit(elastic.EXIT)


class _StoppedToResize(Exception):
    """The workers stopped at a step checkpoint, after ``batches`` of the epoch, for the
    launcher to resize the job: it leaves the epoch's loops for :func:`_epochs`."""

    def __init__(self, batches: int):
        super().__init__(batches)
        self.batches = batches


def _epochs(loop: LoopState) -> int:
    """Train the epochs; returns the batches of the last one trained when the workers stopped
    at a step checkpoint to resize the job (0 otherwise)."""
    run, args = loop.run, loop.config.args
    run.callbacks.on_train_begin(run)  # may stop at once (a resumed run that had ended)
    clock = None  # the last epoch's: every 10th batch of the run is timed, not of each epoch
    for epoch in range(run.start, run.epochs if not run.stop_training else run.start):
        run.epoch = epoch
        run.callbacks.on_epoch_begin(run, epoch)
        try:
            logs, clock = _train_epoch(loop, epoch, clock)
        except _StoppedToResize as stop:
            return stop.batches
        loop.step.average_untrained()  # BatchNorm statistics: one value on every copy
        if args.terminate_on_nan:
            _check_parameters(loop)
        if loop.config.val is not None:
            logs.update({f"val_{k}": v for k, v in _evaluate(loop).items()})
        run.callbacks.on_epoch_end(run, epoch, logs)
        if run.stop_training or run.resizing:
            break
    return 0


def _seed_mxnet(run: Run, epoch: int, done: int = 0) -> None:
    """MXNet's seed set anew every epoch and at every step checkpoint, so that dropout and
    friends replay alike after a resume."""
    path = (epoch, run.rank, done) if done else (epoch, run.rank)
    mx.random.seed(derive_seed(run.seed, MXNET, *path))


def _train_epoch(loop: LoopState, epoch: int,
                 before: Optional[timing.EpochClock]) -> Tuple[dict, timing.EpochClock]:
    """One pass over this worker's share of the training data; returns the epoch's logs and
    its clock, which carries the run's time samples on from ``before``, the last epoch's
    (raises :class:`_StoppedToResize` when the workers stop at a step checkpoint)."""
    run, cfg = loop.run, loop.config
    started = time.perf_counter()
    skip = run.start_batch if epoch == run.start else 0  # resumed from a step checkpoint
    loop.sampler.set_epoch(epoch, skip)
    _seed_mxnet(run, epoch, skip)
    tally = Tally(cfg.objective, loop.resumed_sums if skip else None)
    # A worker of a job checks each batch before its push, so no other worker ever receives
    # the NaN; one process reads the losses of several batches at once, without stalling.
    watch = _NanWatch(run, every=1 if loop.step.distributed else NAN_READ_EVERY) \
        if cfg.args.terminate_on_nan else None
    hooks, clock = run.callbacks.batch_hooks, timing.EpochClock(run.steps - skip, before=before)
    source = cfg.train.epoch(loop.sampler, cfg.ctxs)
    with closing(source):  # an error stops its thread
        samples = _train_batches(loop, clock.waiting(source), tally, watch, clock, hooks, skip)
    if watch is not None:
        watch.check()
    loop.step.flush()  # a last, partial accumulation
    # the epoch's last push, pull and update run on in MXNet's engine: they are the epoch's
    # (without this wait no epoch's time held them, and samples/s read one step too fast)
    mx.nd.waitall()
    seconds = time.perf_counter() - started
    logs = tally.logs(kvs.allreduce if run.agree else None)
    logs.update(epoch_seconds=seconds, samples_per_s=samples / seconds)
    split = clock.split(seconds)
    if run.agree and run.num_workers > 1:
        split = timing.over_workers(split, kvs.allgather)
    logs.update(split)
    return logs, clock


def _train_batches(loop: LoopState, batches, tally, watch, clock, hooks, skip: int) -> int:
    """Train on each batch of the epoch after its first ``skip``; returns the number of
    samples (of all workers)."""
    run, cfg, step, saver = loop.run, loop.config, loop.step, loop.checkpointer
    samples = 0
    for batch, (n, global_count, data, targets) in enumerate(batches, start=skip):
        timed = clock.sample()
        batch_sums: list = []
        outputs, _ = parallel.forward_backward(
            cfg.model, cfg.objective, data, targets, cfg.ctxs, step.loss_scale(n),
            _tallied(tally, watch, batch, n, targets, batch_sums))
        if timed is not None:
            timed.lap("compute")
        step(global_count, timed)
        if n:  # after the step's pushes were issued: a metric may read values on the host
            tally.add_metrics(outputs, targets)
        samples += global_count
        if hooks:
            run.callbacks.on_batch_end(run, batch, _BatchLogs(batch, n, batch_sums))
        if saver is not None:
            saver.raise_failed()  # a background write that failed stops training here
            if loop.checkpoint_due(run.epoch, batch + 1) and \
                    _step_checkpoint(loop, tally, watch, batch + 1):
                raise _StoppedToResize(batch + 1)
    return samples


def _tallied(tally, watch, batch: int, n: int, targets, sums: list):
    """What runs between a batch's passes: its loss sums tallied into ``sums`` and, in a job,
    the loss's NaN check, a host sync that so waits for the forward pass alone and lets the
    pushes overlap backward (see :func:`gluondist.parallel.forward_backward`)."""
    def before_backward(outputs, losses) -> None:
        sums.extend(tally.add_losses(outputs, targets, losses) if n else [])
        if watch is not None:
            watch.add(batch, sums)
    return before_backward


def _step_checkpoint(loop: LoopState, tally: Tally, watch, done: int) -> bool:
    """Checkpoint the epoch's first ``done`` batches; returns whether the workers agreed to
    stop there to resize the job. Every worker does the same, so an uninterrupted run and
    one resumed here compute alike: the loss's NaN check, BatchNorm's statistics made one
    value, the epoch's sums so far folded over the workers, MXNet's seed set anew."""
    run = loop.run
    if watch is not None:
        watch.check()
    loop.step.average_untrained()
    sums = tally.carry(kvs.allreduce if run.agree else None)
    run.resizing = elastic.agreed()
    _seed_mxnet(run, run.epoch, done)
    # the parameters' NaN check (terminate_on_nan) runs in the writer, on its copies: a pass
    # over them here held every step checkpoint up (2-3% of the epoch with 128 MB of arrays
    # every 10 steps, benchmarks/checkpoint_cost.py)
    loop.checkpointer.save(run, run.epoch, done, sums)  # refuse_non_finite: see run.start
    return run.resizing


def _evaluate(loop: LoopState) -> dict:
    """Loss and metrics over all of the validation data; in dist_sync each worker its share."""
    run, c = loop.run, loop.config
    if run.agree:
        return run_pass(c.model, c.objective, c.val, c.ctxs, c.val_batch, run.rank,
                        run.num_workers, kvs.allreduce)
    return run_pass(c.model, c.objective, c.val, c.ctxs, c.val_batch)


def _check_parameters(loop: LoopState) -> None:
    """NaN in a Dataset's samples can hide from the loss (relu passes a NaN weight's column
    as 0) while the weights turn NaN: check them once per epoch, before any checkpoint."""
    run = loop.run
    bad = [name for name, p in _mx.named_parameters(run.net).items()  # one copy each
           if not math.isfinite(float(p.list_data()[0].norm().asscalar()))]
    if bad:
        raise FloatingPointError(snapshot.not_finite(bad, run.epoch, run.epochs))


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


