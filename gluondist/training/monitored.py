"""Callbacks that follow one value of the logs: :class:`EarlyStopping` stops when it no longer
improves, :class:`SaveBest` keeps the parameters of its best epoch."""
from __future__ import annotations

import logging
import os
from typing import Optional, Sequence

from .. import _mx
from .._mx import mx
from .callbacks import Callback
from .checks import check_writable_file
from .console import say

log = logging.getLogger(__name__)


class _Monitor:
    """Follows one value of the logs and says when it improves (EarlyStopping, SaveBest).

    ``mode`` is ``'min'`` or ``'max'``; ``'auto'`` takes ``'min'`` for losses and errors
    (names with "loss", "error", "mse", "mae", "rmse", "cross-entropy") and ``'max'`` for
    "acc"/"accuracy"/"f1"/"precision"/"recall", and refuses to guess otherwise (MXNet's
    Estimator's auto mode always maximises, which stops a loss-monitoring run at random). It is
    decided when fit checks the name against the keys the run records."""

    MINIMISE = ("loss", "error", "mse", "mae", "rmse", "cross-entropy")
    MAXIMISE = ("acc", "f1", "precision", "recall")

    def __init__(self, monitor: str, mode: str, min_delta: float, owner: str):
        if mode not in ("min", "max", "auto"):
            raise ValueError(f"{owner} mode must be 'min', 'max' or 'auto', not {mode!r}")
        self.monitor, self.mode, self.min_delta, self.owner = monitor, mode, abs(min_delta), owner
        self.best: Optional[float] = None

    def check(self, keys: Sequence[str]) -> None:
        """Called by fit before training with the keys the run will record."""
        if self.monitor not in keys:
            no_val = not any(k.startswith("val_") for k in keys)
            hint = " (pass val_data to fit)" if self.monitor.startswith("val_") and no_val else ""
            raise ValueError(f"{self.owner} monitors {self.monitor!r} but the run records "
                             f"{', '.join(keys)}{hint}")
        if self.mode == "auto":
            name = self.monitor.lower()
            if any(k in name for k in self.MINIMISE):
                self.mode = "min"
            elif any(k in name for k in self.MAXIMISE):
                self.mode = "max"
            else:
                raise ValueError(f"{self.owner} cannot tell whether {self.monitor!r} should go "
                                 "up or down; pass mode='min' or mode='max'")

    def improved(self, logs) -> bool:
        """True (and the new best kept) when this epoch's value beats the best so far."""
        self.check(list(logs))
        value = logs[self.monitor]
        better = self.best is None or (value < self.best - self.min_delta if self.mode == "min"
                                       else value > self.best + self.min_delta)
        if better:
            self.best = value
        return better


class EarlyStopping(_Monitor, Callback):
    """Stop once ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs in a row
    (as Keras; 0 and 1 both stop at the first epoch without improvement). ``mode``: see
    ``_Monitor``. With ``restore_best_weights`` the net ends with the best epoch's weights,
    stopped early or not. Its state (best value, patience count, best weights) is checkpointed,
    so a resumed run stops where an uninterrupted one would."""

    def __init__(self, monitor: str = "val_loss", mode: str = "auto", patience: int = 0,
                 min_delta: float = 0.0, restore_best_weights: bool = False):
        _Monitor.__init__(self, monitor, mode, min_delta, type(self).__name__)
        self.patience = patience
        self.wait = 0
        self.stopped_epoch: Optional[int] = None
        self.restore_best_weights = restore_best_weights
        self.best_weights: Optional[dict] = None
        self.best_epoch: Optional[int] = None
        self._restored = False

    def on_train_begin(self, run):
        """A fresh run starts from scratch (as Keras); a resumed one that had already stopped
        early trains no further: it ends where the uninterrupted run ended."""
        if self._restored and self.stopped_epoch is not None:
            run.stop_training = True
            say(log, f"early stopping had stopped this run at epoch {self.stopped_epoch + 1}; "
                     "nothing to train (resume=False starts a fresh run)")
        elif not self._restored:
            self.best, self.wait, self.stopped_epoch = None, 0, None
            self.best_weights, self.best_epoch = None, None
        self._restored = False

    def on_epoch_end(self, run, epoch, logs):
        if self.improved(logs):
            self.wait, self.best_epoch = 0, epoch
            if self.restore_best_weights:  # a copy in host memory, off the devices
                self.best_weights = {name: p.data(p.list_ctx()[0]).copyto(mx.cpu())
                                     for name, p in _mx.named_parameters(run.net).items()}
            return
        self.wait += 1
        if self.wait >= max(self.patience, 1):  # as Keras: the patience-th epoch stops
            self.stopped_epoch = epoch
            run.stop_training = True
            say(log, f"early stopping at epoch {epoch + 1}: {self.monitor} did not improve on "
                     f"{self.best:.6g} for {self.wait} epoch(s)")

    def on_train_end(self, run):
        if self.restore_best_weights and self.best_weights is not None:
            from ..devices import assign
            for name, p in _mx.named_parameters(run.net).items():
                assign(p, self.best_weights[name])
            log.info("restored the weights of epoch %d (best %s %.6g)", self.best_epoch + 1,
                     self.monitor, self.best)

    def state_dict(self):
        return {"best": self.best, "wait": self.wait, "best_epoch": self.best_epoch,
                "stopped_epoch": self.stopped_epoch}

    def load_state_dict(self, state):
        self.best, self.wait = state["best"], state["wait"]
        self.best_epoch, self.stopped_epoch = state["best_epoch"], state.get("stopped_epoch")
        self._restored = True

    def state_arrays(self):
        return dict(self.best_weights or {}) if self.restore_best_weights else {}

    def load_state_arrays(self, arrays):
        self.best_weights = dict(arrays)


class SaveBest(_Monitor, Callback):
    """Write the net's parameters to ``path`` (MXNet's own format: ``net.load_parameters(path)``
    opens it) each time ``monitor`` improves; worker 0 only, atomically (a temporary file
    renamed over). Its best value survives a resume."""

    def __init__(self, path, monitor: str = "val_loss", mode: str = "auto",
                 min_delta: float = 0.0):
        _Monitor.__init__(self, monitor, mode, min_delta, type(self).__name__)
        self.path = str(path)

    def check(self, keys: Sequence[str]) -> None:
        super().check(keys)
        check_writable_file(self.path, "SaveBest")

    def on_epoch_end(self, run, epoch, logs):
        if self.improved(logs) and run.rank == 0:
            tmp = f"{self.path}.{os.getpid()}.tmp"
            run.net.save_parameters(tmp)
            os.replace(tmp, self.path)

    def state_dict(self):
        return {"best": self.best}

    def load_state_dict(self, state):
        self.best = state["best"]
