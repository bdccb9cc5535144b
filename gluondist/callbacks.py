"""Callbacks for :func:`gluondist.fit`, and the History it returns.

Everything fit does besides training is a callback held by one :class:`CallbackList`, as in
Keras: the progress bar or per-epoch log line, the History, checkpointing and the launcher's
progress heartbeat. Passing an instance of one of those classes (or a subclass) in
``callbacks=`` replaces fit's own.
"""
from __future__ import annotations

import logging
import math
from typing import Dict, List, Optional, Sequence

from . import heartbeat

log = logging.getLogger(__name__)


class Callback:
    """Override any hook. ``run`` is the training run: ``run.net``, ``run.trainer``,
    ``run.history``, ``run.epoch``, ``run.epochs``, ``run.rank``, ``run.num_workers``, and
    ``run.stop_training``, which a callback sets to True to stop. Training then stops at the end
    of the current epoch (in a job, once all workers have finished it), so the checkpoint of
    that epoch is complete and a later fit resumes exactly.

    A callback whose state should survive a resume (as EarlyStopping's does) returns it from
    ``state_dict()`` as JSON-serialisable data and takes it back in ``load_state_dict()``."""

    def on_train_begin(self, run) -> None:
        pass

    def on_epoch_begin(self, run, epoch: int) -> None:
        pass

    def on_batch_end(self, run, batch: int, logs) -> None:
        """``logs`` has ``batch``, ``size`` and ``loss`` (this worker's mean loss of the batch,
        read from the device only when asked for)."""

    def on_epoch_end(self, run, epoch: int, logs: Dict[str, float]) -> None:
        """``logs`` holds this epoch's values, with the History's keys."""

    def on_train_end(self, run) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class CallbackList:
    """Runs the hooks of several callbacks in order; decides once whether per-batch hooks are
    needed at all (none overridden: fit never builds the batch's logs)."""

    def __init__(self, callbacks: Sequence[Callback]):
        self.callbacks = list(callbacks)
        self.batch_hooks = [cb for cb in self.callbacks
                            if type(cb).on_batch_end is not Callback.on_batch_end]

    def first(self, kind) -> Optional[Callback]:
        return next((cb for cb in self.callbacks if isinstance(cb, kind)), None)

    def on_train_begin(self, run):
        for cb in self.callbacks:
            cb.on_train_begin(run)

    def on_epoch_begin(self, run, epoch):
        for cb in self.callbacks:
            cb.on_epoch_begin(run, epoch)

    def on_batch_end(self, run, batch, logs):
        for cb in self.batch_hooks:
            cb.on_batch_end(run, batch, logs)

    def on_epoch_end(self, run, epoch, logs):
        for cb in self.callbacks:
            cb.on_epoch_end(run, epoch, logs)

    def on_train_end(self, run):
        for cb in self.callbacks:
            cb.on_train_end(run)

    def _keys(self):
        """A key per callback: its class and how many of that class came before it (stable
        across a resume that passes the same callbacks, whatever fit adds around them)."""
        seen: Dict[str, int] = {}
        for cb in self.callbacks:
            name = type(cb).__name__
            seen[name] = seen.get(name, -1) + 1
            yield f"{name}:{seen[name]}", cb

    def state_dict(self) -> Dict[str, dict]:
        return {key: cb.state_dict() for key, cb in self._keys() if cb.state_dict()}

    def load_state_dict(self, states: Dict[str, dict]) -> None:
        for key, cb in self._keys():
            if states.get(key):
                cb.load_state_dict(states[key])


class History(Callback):
    """What :func:`gluondist.fit` returns. ``history`` maps each key (``loss``, each metric,
    and ``val_loss``/``val_<metric>`` with validation data) to one value per epoch; ``epoch``
    lists the epochs."""

    def __init__(self, history: Optional[Dict[str, List[float]]] = None):
        self.history: Dict[str, List[float]] = history or {}
        self.epoch: List[int] = list(range(len(next(iter(self.history.values()), []))))

    def on_epoch_end(self, run, epoch, logs):
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)

    def plot(self, path=None):
        """Draw the learning curves (one panel for losses, one per metric). Saves to ``path``
        when given; returns the matplotlib Figure. Needs matplotlib: pip install
        'gluondist[plot]'."""
        if not self.epoch:
            raise ValueError("History.plot: the history has no epochs to plot (fit ran 0 "
                             "epochs, or resumed a run that had already finished)")
        try:
            from matplotlib.figure import Figure  # no pyplot: works headless and in notebooks
        except ImportError as exc:
            raise ImportError("History.plot needs matplotlib: pip install 'gluondist[plot]'") \
                from exc
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


class ProgressBar(Callback):
    """A tqdm bar per epoch (worker 0 only), with the epoch's figures at its end."""

    def on_epoch_begin(self, run, epoch):
        self.bar = None
        if run.rank == 0:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=run.steps, desc=f"epoch {epoch + 1}/{run.epochs}", leave=True)

    def on_batch_end(self, run, batch, logs):
        if self.bar is not None:
            self.bar.update(1)

    def on_epoch_end(self, run, epoch, logs):
        if self.bar is not None:
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in logs.items()})
            self.bar.close()


class EpochLogger(Callback):
    """One ``logging`` line per epoch from worker 0 (``logging.basicConfig(level=INFO)`` shows
    it; a launched worker shows it by default)."""

    def on_epoch_end(self, run, epoch, logs):
        if run.rank == 0:
            log.info("epoch %d/%d: %s", epoch + 1, run.epochs,
                     "  ".join(f"{k}={v:.4f}" for k, v in logs.items()))


class Checkpointer(Callback):
    """After every epoch, worker 0 writes a checkpoint to ``directory`` (see
    :mod:`gluondist.checkpoint`): parameters, optimizer state, history, RNG and callback
    states. fit adds one for ``checkpoint_dir`` and resumes from it."""

    def __init__(self, directory):
        self.directory = directory

    def on_epoch_end(self, run, epoch, logs):
        if run.rank != 0:
            return
        from . import checkpoint  # MXNet: imported when a checkpoint is first written
        checkpoint.save(self.directory, epoch, run.net, None if run.step.async_mode else
                        run.trainer, {"seed": run.seed, "signature": checkpoint.signature(run.net),
                                      "history": run.history.history,
                                      "rng": checkpoint.rng_states(),
                                      "callbacks": run.callbacks.state_dict()})


class Heartbeat(Callback):
    """Tells the launcher each finished batch, for its stall detection (a no-op elsewhere)."""

    def on_batch_end(self, run, batch, logs):
        heartbeat.beat()


class EarlyStopping(Callback):
    """Stop once ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs in a row
    (as Keras; 0 and 1 both stop at the first epoch without improvement).

    ``mode`` is ``'min'`` or ``'max'``; ``'auto'`` takes ``'min'`` for names with "loss" or
    "error" and ``'max'`` for "acc"/"accuracy"/"f1", and refuses to guess otherwise (MXNet's
    Estimator's auto mode always maximises, which stops a loss-monitoring run at random). Its
    best value and patience count are checkpointed, so a resumed run stops where an
    uninterrupted one would."""

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

    def check(self, keys: Sequence[str]) -> None:
        """Called by fit before training with the keys the run will record."""
        if self.monitor not in keys:
            hint = " (pass val_data to fit)" if self.monitor.startswith("val_") else ""
            raise ValueError(f"EarlyStopping monitors {self.monitor!r} but the run records "
                             f"{', '.join(keys)}{hint}")

    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_epoch_end(self, run, epoch, logs):
        self.check(list(logs))
        value = logs[self.monitor]
        if self._improved(value):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= max(self.patience, 1):  # as Keras: the patience-th epoch stops
            self.stopped_epoch = epoch
            run.stop_training = True
            log.info("early stopping at epoch %d: %s did not improve on %.6g for %d epoch(s)",
                     epoch + 1, self.monitor, self.best, self.wait)

    def state_dict(self):
        return {"best": self.best, "wait": self.wait}

    def load_state_dict(self, state):
        self.best, self.wait = state["best"], state["wait"]
