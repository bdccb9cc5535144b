"""Callbacks for :func:`gluondist.fit`, and the History it returns."""
from __future__ import annotations

import logging
import math
from typing import Dict, List, Optional

log = logging.getLogger(__name__)


class Callback:
    """Override any hook. ``run`` is the training run: ``run.net``, ``run.trainer``,
    ``run.history``, ``run.epoch``, and ``run.stop_training`` which a callback sets to True to
    stop. In one process training stops after the current batch; in a launched job all workers
    agree at the end of the epoch (stopping one worker alone would deadlock the others)."""

    def on_train_begin(self, run) -> None:
        pass

    def on_epoch_begin(self, run, epoch: int) -> None:
        pass

    def on_batch_end(self, run, batch: int, logs: Dict[str, float]) -> None:
        """``logs`` has ``batch``, ``size`` and ``loss`` (this worker's mean loss of the batch)."""

    def on_epoch_end(self, run, epoch: int, logs: Dict[str, float]) -> None:
        """``logs`` holds this epoch's values, with the History's keys."""

    def on_train_end(self, run) -> None:
        pass


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs.

    ``mode`` is ``'min'`` or ``'max'``; ``'auto'`` takes ``'min'`` for names with "loss" or
    "error" and ``'max'`` for "acc"/"accuracy"/"f1", and refuses to guess otherwise (MXNet's
    Estimator's auto mode always maximises, which stops a loss-monitoring run at random)."""

    def __init__(self, monitor: str = "val_loss", mode: str = "auto", patience: int = 0,
                 min_delta: float = 0.0):
        if mode == "auto":
            name = monitor.lower()
            if "loss" in name or "error" in name:
                mode = "min"
            elif any(k in name for k in ("acc", "f1", "precision", "recall")):
                mode = "max"
            else:
                raise ValueError(f"EarlyStopping cannot tell whether {monitor!r} should go up "
                                 "or down; pass mode='min' or mode='max'")
        if mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping mode must be 'min', 'max' or 'auto', not {mode!r}")
        self.monitor, self.mode = monitor, mode
        self.patience, self.min_delta = patience, abs(min_delta)
        self.best: Optional[float] = None
        self.wait = 0
        self.stopped_epoch: Optional[int] = None

    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_epoch_end(self, run, epoch, logs):
        if self.monitor not in logs:
            raise ValueError(f"EarlyStopping monitors {self.monitor!r} but the run records "
                             f"{', '.join(sorted(logs))}")
        value = logs[self.monitor]
        if self._improved(value):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            run.stop_training = True
            log.info("early stopping at epoch %d: %s did not improve on %.6g for %d epoch(s)",
                     epoch + 1, self.monitor, self.best, self.wait)


class History:
    """What :func:`gluondist.fit` returns. ``history`` maps each key (``loss``, each metric,
    and ``val_loss``/``val_<metric>`` with validation data) to one value per epoch."""

    def __init__(self, history: Optional[Dict[str, List[float]]] = None):
        self.history: Dict[str, List[float]] = history or {}
        self.epoch: List[int] = list(range(len(next(iter(self.history.values()), []))))

    def append(self, epoch: int, logs: Dict[str, float]) -> None:
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)

    def plot(self, path=None):
        """Draw the learning curves (one panel for losses, one per metric). Saves to ``path``
        when given; returns the matplotlib Figure. Needs matplotlib: pip install
        'gluondist[plot]'."""
        try:
            from matplotlib.figure import Figure  # no pyplot: works headless and in notebooks
        except ImportError:
            raise ImportError("History.plot needs matplotlib: pip install 'gluondist[plot]'") \
                from None
        names = [k for k in self.history if not k.startswith("val_")]
        fig = Figure(figsize=(5 * len(names), 3.5))
        axes = fig.subplots(1, len(names), squeeze=False)
        epochs = [e + 1 for e in self.epoch]
        for ax, name in zip(axes[0], names):
            for key in (name, f"val_{name}"):
                values = self.history.get(key)
                if values and not all(math.isnan(v) for v in values):
                    ax.plot(epochs, values, marker="o", label=key)
            ax.set_xlabel("epoch")
            ax.set_title(name)
            ax.legend()
        fig.tight_layout()
        if path is not None:
            fig.savefig(path)
        return fig
