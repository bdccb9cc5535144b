"""Callbacks that keep a run's figures: :class:`CSVLogger` and :class:`TensorBoard`.

Both write from worker 0 only, one entry per epoch with the History's keys (the time split
included)."""
from __future__ import annotations

import csv
import os
import time
from typing import List, Optional

from .. import extra_hint
from .callbacks import Callback
from .checks import check_writable_file

TENSORBOARD_HINT = extra_hint("tensorboard")


class CSVLogger(Callback):
    """One row per epoch in ``path``: ``epoch`` (counted from 0, as in the History) and every
    History key. With ``append`` (the default) rows are added after those already there (as
    Keras does); a run resumed from a checkpoint first drops the file's last rows of the epochs
    it trains again (written before a crash lost their checkpoint), so none is repeated.
    Without ``append`` the file starts over: with the History's rows of the epochs a resumed
    run has already trained, then the new ones."""

    def __init__(self, path, append: bool = True):
        self.path, self.append = str(path), append
        self._rows: Optional[List[dict]] = None

    def check(self, keys) -> None:
        check_writable_file(self.path, "CSVLogger")

    def on_train_begin(self, run):
        if run.rank != 0:
            return
        self._rows = []
        if self.append and os.path.isfile(self.path):
            with open(self.path, newline="") as f:
                self._rows = list(csv.DictReader(f))
            while _resumed(run) and self._rows and _epoch(self._rows[-1]) >= run.start:
                self._rows.pop()  # trained again now: replaced, not repeated
        elif run.start > 0:  # a resumed run starts over with the epochs its History has
            history = run.history.history
            self._rows = [{"epoch": e, **{k: v[e] for k, v in history.items()}}
                          for e in range(run.start)]

    def on_epoch_end(self, run, epoch, logs):
        if run.rank != 0:
            return
        self._rows.append({"epoch": epoch, **logs})
        fields = ["epoch"] + list(dict.fromkeys(k for row in self._rows for k in row
                                               if k != "epoch"))
        tmp = f"{self.path}.{os.getpid()}.tmp"  # a reader never sees half a file
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, restval="")
            writer.writeheader()
            writer.writerows(self._rows)
        os.replace(tmp, self.path)


class TensorBoard(Callback):
    """Every History value as a scalar per epoch (tag = the key, step = the epoch) in TensorBoard
    event files under ``log_dir``, and with ``batch_every=N`` the training loss of every N-th
    batch (tag ``batch_loss``, step = the batch counted over the whole run) under
    ``log_dir/batches``. A run resumed from a checkpoint hides the points of the epochs and
    batches it trains again (TensorBoard's purge step, which covers every tag of a directory:
    hence the batches' own). Needs tensorboardX (gluondist's ``tensorboard`` extra); view with
    ``tensorboard --logdir LOG_DIR``."""

    def __init__(self, log_dir, batch_every: Optional[int] = None):
        try:
            import tensorboardX  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"gluondist.TensorBoard needs tensorboardX: {TENSORBOARD_HINT}") \
                from exc
        if batch_every is not None and (not isinstance(batch_every, int) or batch_every < 1):
            raise ValueError(f"batch_every must be a positive integer or None, not "
                             f"{batch_every!r}")
        self.log_dir, self.batch_every = str(log_dir), batch_every
        self._writer = self._batches = None

    _opened = 0  # writers opened by this process

    def on_train_begin(self, run):
        if run.rank == 0:
            from tensorboardX import SummaryWriter
            # tensorboardX names its file after the second it was opened: two fits in one
            # second would share (and overwrite) it without a suffix of their own. TensorBoard
            # reads a directory's files in the order of their names, in which a resumed run's
            # (with its purge step) must come after those it hides: the clock in nanoseconds,
            # zero-padded, leads the suffix (a counter of 10 sorted before one of 9)
            TensorBoard._opened += 1
            suffix = f".{time.time_ns():020d}.{os.getpid()}.{TensorBoard._opened}"
            again = _resumed(run)  # what an earlier attempt wrote from here on is hidden
            self._writer = SummaryWriter(self.log_dir, filename_suffix=suffix,
                                         purge_step=run.start if again else None)
            if self.batch_every:
                self._batches = SummaryWriter(
                    os.path.join(self.log_dir, "batches"), filename_suffix=suffix,
                    purge_step=_step(run, run.start, run.start_batch) if again else None)

    def on_batch_end(self, run, batch, logs):
        step = _step(run, run.epoch, batch)
        if self._batches is not None and step % self.batch_every == 0:
            self._batches.add_scalar("batch_loss", logs["loss"], step)

    def on_epoch_end(self, run, epoch, logs):
        if self._writer is not None:
            for key, value in logs.items():
                self._writer.add_scalar(key, value, epoch)
            self._writer.flush()
        if self._batches is not None:
            self._batches.flush()

    def on_train_end(self, run):
        for writer in (self._writer, self._batches):
            if writer is not None:
                writer.close()
        self._writer = self._batches = None

    def on_exception(self, run, exc):
        self.on_train_end(run)  # the writer (and its thread) closed, what it wrote kept


def _resumed(run) -> bool:
    """Whether the run continues from a checkpoint (an epoch's end, or mid-epoch)."""
    return run.start > 0 or run.start_batch > 0


def _step(run, epoch: int, batch: int) -> int:
    """A batch's step: counted over the whole run, resumes included."""
    return epoch * run.steps + batch


def _epoch(row: dict) -> int:
    text = row.get("epoch") or ""
    return int(text) if text.isdigit() else -1
