"""One fit call's state as callbacks see it (:class:`Run`), what fit's loop keeps beside it
(:class:`LoopState`), and how fit gets them ready: restore a checkpoint, join the job, agree
with the other workers, make the trainer."""
from __future__ import annotations

import hashlib
import logging
import os
import random
import sys
import zlib
from dataclasses import dataclass, field
from typing import Optional

from .. import checkpoint, envvars, kvstore as kvs, syncbn
from .._mx import mx
from ..kv.kinds import Mode
from ..kv.sampling import SEEDS
from .callbacks import (CallbackList, Checkpointer, EpochLogger, Heartbeat, History, ProgressBar,
                        StopAgreement)
from .config import FitConfig
from .console import say
from .evaluation import SHARD_HINT, differences

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Run:
    """One fit call as callbacks see it: the callback API (see :class:`gluondist.Callback`)."""

    net: mx.gluon.Block
    trainer: mx.gluon.Trainer
    history: History
    callbacks: CallbackList
    epochs: int
    start: int  # the first epoch this call trains (after a resume, the checkpoint's next)
    steps: int  # batches per epoch on every worker
    rank: int
    num_workers: int
    seed: int
    mode: Optional[Mode]  # the kvstore's (None without one)
    # samples per step over all workers: batch_size x num_workers at the run's first start,
    # kept when an elastic job resumes with another worker count
    global_batch: int = 0
    # a run resumed from a checkpoint within epoch ``start``: the batches of it already trained
    start_batch: int = 0
    epoch: int = field(init=False)
    stop_training: bool = False  # a callback sets it to stop at the end of the epoch
    # the workers agreed to stop at this epoch's end (or step checkpoint) for the launcher to
    # resize the job (gluondist.elastic): fit then leaves the process, after the checkpoint
    resizing: bool = False

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


@dataclass(frozen=True, eq=False)
class LoopState:
    """What fit's loop works with: the checked call, the Run it shows callbacks, and its own
    parts, which callbacks never see."""

    config: FitConfig
    run: Run
    step: kvs.TrainStep  # one optimizer step per batch, whatever the kvstore mode
    sampler: kvs.ShardedBatchSampler  # this worker's share of every global batch
    checkpointer: Optional[Checkpointer] = None  # the one writing checkpoint_dir, if any
    resumed_sums: Optional[list] = None  # the epoch's sums at the step checkpoint resumed

    def checkpoint_due(self, epoch: int, done: int) -> bool:
        """Whether a step checkpoint falls after ``done`` batches of ``epoch``: on an update
        boundary, every ``checkpoint_every`` updates counted over the run, not at the epoch's
        end (which has its own)."""
        every, k = self.config.args.checkpoint_every, self.config.args.accumulate
        if every is None or done % k or done >= self.run.steps:
            return False
        updates = epoch * -(-self.run.steps // k) + done // k  # a partial last one counts
        return updates % every == 0


def start(cfg: FitConfig) -> LoopState:
    """Restore from a checkpoint, join the job's kvstore, make the trainer: ready to train."""
    args, ctxs = cfg.args, cfg.ctxs
    ckpt = _restore(cfg)
    seed = ckpt.state.seed if ckpt is not None else args.seed
    kv = kvs.create(cfg.mode, cfg.copies) if cfg.mode is not None else None
    distributed = cfg.mode is not None and cfg.mode.distributed
    rank, workers = (kv.rank, kv.num_workers) if distributed else (0, 1)
    if seed is None:
        seed = _job_seed() if distributed else random.SystemRandom().randrange(SEEDS)
    start = (ckpt.epoch + (ckpt.batch is None)) if ckpt is not None else 0
    start_batch = (ckpt.batch or 0) if ckpt is not None else 0
    if args.sync_batchnorm:  # the shapes are known (prepare ran a batch), before the trainer
        syncbn.sync_batchnorm(cfg.model, kv if distributed else None)
    trainer = cfg.layout.make_trainer(cfg.model, cfg.optimizer, cfg.opt_params or None, kv,
                                      cfg.copies, cfg.batch_size * args.accumulate,
                                      compression=args.compression)
    step = kvs.TrainStep(trainer, kv, ctxs, cfg.batch_size, cfg.clip, args.accumulate)
    if step.agree:
        _agree(cfg, start, start_batch)
    callbacks = _callback_list(cfg)
    # an elastic job's restart keeps the global batch of the run's first start
    global_batch = (ckpt.state.global_batch if ckpt is not None else None) or \
        cfg.batch_size * workers
    sampler = kvs.ShardedBatchSampler(len(cfg.train), cfg.batch_size, workers, rank, seed=seed,
                                      last_batch=cfg.train.last_batch,
                                      global_batch_size=global_batch)
    if args.sync_batchnorm:
        syncbn.check_shares(len(cfg.train), global_batch, workers, cfg.train.last_batch)
    run = Run(net=args.net, trainer=trainer, history=callbacks.first(History),
              callbacks=callbacks, epochs=args.epochs, start=start, steps=len(sampler),
              rank=rank, num_workers=workers, seed=seed, mode=cfg.mode,
              global_batch=global_batch, start_batch=start_batch)
    if ckpt is not None:
        checkpoint.restore_trainer(ckpt, trainer)
        ckpt.state.apply(run, ckpt.callback_arrays)
    if rank == 0:
        _announce(run, cfg.checkpoint_dir if ckpt is not None else None, cfg.args.accumulate)
        if ckpt is not None:
            _batch_note(ckpt.state.global_batch, cfg.batch_size, workers, global_batch)
    checkpointer = callbacks.first(Checkpointer)
    if checkpointer is not None:  # the NaN check of a step checkpoint, in its writer
        checkpointer.refuse_non_finite = cfg.args.terminate_on_nan
    return LoopState(config=cfg, run=run, step=step, sampler=sampler,
                     checkpointer=checkpointer,
                     resumed_sums=ckpt.state.sums if ckpt is not None else None)


def _announce(run: Run, resumed_from: Optional[str], accumulate: int = 1) -> None:
    """One line when this call does not train a fresh run's epochs: a resume (running the same
    cell twice resumes), or nothing to train. Mid-epoch with ``accumulate``, the batch is also
    said as the epoch's optimizer steps."""
    if resumed_from is None:
        if run.epochs == 0:
            say(log, "fit: epochs=0: nothing to train (the History returned is empty)")
    elif run.start_batch:
        steps = "" if accumulate == 1 else \
            f", its update {run.start_batch // accumulate} of {-(-run.steps // accumulate)}"
        say(log, f"fit: resuming from {resumed_from} in epoch {run.start + 1} of {run.epochs}, "
                 f"after its batch {run.start_batch} of {run.steps}{steps} (resume=False starts "
                 "over)")
    elif run.start < run.epochs:
        say(log, f"fit: resuming from {resumed_from} after epoch {run.start} of {run.epochs} "
                 "(resume=False starts over)")
    else:
        say(log, f"fit: the run in {resumed_from} had already trained {run.start} epoch(s) "
                 f"(epochs={run.epochs}): nothing to train; raise epochs to train on, or pass "
                 "resume=False to start over")


def _batch_note(saved: Optional[int], batch_size: int, workers: int, used: int) -> None:
    """One line when a resumed run's global batch is not batch_size x workers of this start."""
    if saved is None:
        say(log, f"fit: the checkpoint does not record its global batch (written before "
                 f"elastic jobs): going on with batch_size {batch_size} x {workers} worker(s) "
                 f"= {used}, which matches the run only if it started with {workers}")
    elif used != batch_size * workers:
        say(log, f"fit: {workers} worker(s) take their slices of the run's global batch of "
                 f"{used} (batch_size x workers at its first start), not {batch_size} each")


def _agree(cfg: FitConfig, start: int, start_batch: int) -> None:
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
                          "epochs": cfg.args.epochs, "accumulate": cfg.args.accumulate,
                          "checkpoint_every (-1: none)": cfg.args.checkpoint_every or -1,
                          "seed (-1: none)": -1 if cfg.args.seed is None else cfg.args.seed,
                          "last_batch (0: keep, 1: discard)": last[cfg.train.last_batch],
                          "val last_batch (0: keep, 1: discard)":
                              last[cfg.val.last_batch] if cfg.val is not None else -1,
                          "optimizer and its settings (a checksum)": _settings_digest(cfg)})
    if differ:
        raise ValueError(f"the workers called fit with different settings ({differ}); every "
                         "worker must make the same fit call")
    if differences({"resumed epoch": start, "resumed batch": start_batch}):
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


def _restore(cfg: FitConfig) -> Optional[checkpoint.Checkpoint]:
    """Load the newest checkpoint of this run into the net (every worker reads it)."""
    directory = cfg.checkpoint_dir
    if directory is None:
        return None
    if not cfg.args.resume:
        if kvs.rank() == 0:
            checkpoint.start_fresh(directory)
        return None
    ckpt = checkpoint.load_latest(directory)
    if ckpt is None:
        return None
    if ckpt.state.signature != checkpoint.signature(cfg.args.net):
        raise ValueError(f"checkpoint_dir {directory} holds a checkpoint of a different model "
                         f"({ckpt.path.name}); pass a directory of its own, or resume=False to "
                         "start a fresh run there (the old checkpoints are then never resumed)")
    checkpoint.restore_net(ckpt, cfg.args.net)
    return ckpt


def _callback_list(cfg: FitConfig) -> CallbackList:
    """The user's callbacks with fit's own around them, unless the user passed their kind:
    the bar or log line first, then the user's, the stop agreement (a job's workers agree on
    the user's stop requests), History, the heartbeat, the checkpoint last (so it records what
    every other callback did this epoch)."""
    mine = [cb for cb in cfg.callbacks if not isinstance(cb, Checkpointer)]
    has = lambda kind: any(isinstance(cb, kind) for cb in mine)
    before, after = [], [StopAgreement()]
    if not has(ProgressBar) and not has(EpochLogger):
        progress = cfg.args.progress
        if progress is None:  # as Keras: a bar in a terminal or notebook, else a line per epoch
            before.append(ProgressBar() if _interactive() else EpochLogger())
        elif progress:
            before.append(ProgressBar())
    if not has(History):
        after.append(History())
    if not has(Heartbeat):
        after.append(Heartbeat())
    if cfg.checkpoint_dir is not None:  # the user's (see checkpoint_dir_of), or fit's own
        after.append(next((cb for cb in cfg.callbacks if isinstance(cb, Checkpointer)),
                          None) or Checkpointer(cfg.checkpoint_dir))
    return CallbackList(before + mine + after)


def _job_seed() -> int:
    """A seed every worker of this job derives alike (it differs from job to job)."""
    job = f"{os.environ.get(envvars.DMLC_PS_ROOT_URI)}:{os.environ.get(envvars.DMLC_PS_ROOT_PORT)}"
    return int(hashlib.sha256(job.encode()).hexdigest()[:8], 16) % SEEDS


def _interactive() -> bool:
    """A terminal on stderr, or a Jupyter kernel: a shell with a kernel, not merely a process
    that imported ipykernel (nbclient's, or a test suite's, shows no progress bar)."""
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    return hasattr(shell, "kernel") or sys.stderr.isatty()
