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

from .. import elastic, extra_hint, heartbeat
from .console import say
from .timing import KEYS as SPLIT_KEYS

log = logging.getLogger(__name__)


class Callback:
    """Override any hook. ``run`` is the training run: ``run.net``, ``run.trainer``,
    ``run.history``, ``run.epoch``, ``run.epochs``, ``run.start`` (the first epoch this call
    trains), ``run.steps`` (batches per epoch), ``run.rank``, ``run.num_workers``, ``run.seed``,
    ``run.start_batch`` (after a resume from a checkpoint within epoch ``run.start``, the
    batches of it trained before: its first ``on_batch_end`` has that batch index),
    ``run.mode`` (the kvstore's :class:`~gluondist.kv.kinds.Mode`, None without one), ``run.agree``
    (the workers step together), ``run.updates_on_servers`` (``dist_async``),
    ``run.callbacks``, ``run.global_batch`` (samples per step over all workers: an elastic
    job keeps its first start's), and ``run.stop_training``, which a callback sets to True to
    stop. Training then stops at the end of the current epoch (in a job, once all workers have
    finished it), so the checkpoint of that epoch is complete and a later fit resumes exactly.
    ``run.resizing`` is True at an epoch's end (or a ``checkpoint_every`` checkpoint) when the
    workers agreed to stop there for the launcher to grow the job (gluondist.elastic): fit
    then ends the process after that checkpoint, and the job resumes from it with more
    workers.

    A callback whose state should survive a resume (as EarlyStopping's does) returns it from
    ``state_dict()`` as JSON-serialisable data and takes it back in ``load_state_dict()``."""

    def check(self, keys: Sequence[str]) -> None:
        """Before training, with the keys the run's logs will have: raise ValueError for a
        setting that cannot work (a monitored key the run does not record, say)."""

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
        """After the last epoch of a fit that ended without an error."""

    def on_exception(self, run, exc: BaseException) -> None:
        """Instead of ``on_train_end`` when fit raises (``KeyboardInterrupt`` included): close
        what the callback opened. fit re-raises ``exc`` afterwards; checkpoints already written
        stay as they are."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def state_arrays(self) -> dict:
        """Arrays (name -> NDArray) to checkpoint beside ``state_dict()``, e.g. best weights."""
        return {}

    def load_state_arrays(self, arrays: dict) -> None:
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
        """Every callback closes, even when one before it fails; the first error is raised."""
        errors = []
        for cb in self.callbacks:
            try:
                cb.on_train_end(run)
            except Exception as exc:
                if errors:
                    log.exception("%s.on_train_end failed", type(cb).__name__)
                errors.append(exc)
        if errors:
            raise errors[0]

    def on_exception(self, run, exc):
        """Every callback hears of ``exc``, even when one of them fails in turn (logged)."""
        for cb in self.callbacks:
            try:
                cb.on_exception(run, exc)
            except Exception:
                log.exception("%s.on_exception failed", type(cb).__name__)

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

    def state_arrays(self) -> dict:
        return {f"{key}/{name}": array for key, cb in self._keys()
                for name, array in cb.state_arrays().items()}

    def load_state_dict(self, states: Dict[str, dict], arrays: Optional[dict] = None) -> None:
        arrays = arrays or {}
        for key, cb in self._keys():
            if states.get(key):
                cb.load_state_dict(states[key])
            mine = {name[len(key) + 1:]: a for name, a in arrays.items()
                    if name.startswith(key + "/")}
            if mine:
                cb.load_state_arrays(mine)


# In the History, but not learning curves: History.plot and the epoch line leave them out.
SPEED_KEYS = ("epoch_seconds", "samples_per_s", *SPLIT_KEYS,
              *(f"slowest_{k}" for k in SPLIT_KEYS), "slowest_worker")


def format_logs(logs: Dict[str, float], split: bool = False) -> str:
    """``loss=0.1234  accuracy=0.9500  ...  3.2s 1234 samples/s`` for one epoch's logs; with
    ``split``, also ``(data 0.1s, compute 2.9s, sync 0.2s)``."""
    text = "  ".join(f"{k}={v:.4f}" for k, v in logs.items() if k not in SPEED_KEYS)
    if "epoch_seconds" in logs:
        text += f"  {logs['epoch_seconds']:.2f}s {logs['samples_per_s']:.0f} samples/s"
    if split and "data_seconds" in logs:
        text += " (" + ", ".join(f"{k.split('_')[0]} {logs[k]:.2f}s" for k in SPLIT_KEYS) + ")"
        if "slowest_worker" in logs:
            text += (f" slowest worker {int(logs['slowest_worker'])}: " + ", ".join(
                f"{k.split('_')[0]} {logs['slowest_' + k]:.2f}s" for k in SPLIT_KEYS))
    return text


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
        when given; returns the matplotlib Figure. Needs matplotlib (gluondist's ``plot``
        extra)."""
        if not self.epoch:
            raise ValueError("History.plot: the history has no epochs to plot (fit ran 0 "
                             "epochs, or resumed a run that had already finished)")
        try:
            from matplotlib.figure import Figure  # no pyplot: works headless and in notebooks
        except ImportError as exc:
            raise ImportError(f"History.plot needs matplotlib: {extra_hint('plot')}") from exc
        names = [k for k in self.history if not k.startswith("val_") and k not in SPEED_KEYS]
        fig = Figure(figsize=(5 * len(names), 3.5))
        axes = fig.subplots(1, len(names), squeeze=False)
        epochs = [e + 1 for e in self.epoch]
        for ax, name in zip(axes[0], names):
            for key in (name, f"val_{name}"):
                values = self.history.get(key)
                if values and not all(math.isnan(v) for v in values):
                    ax.plot(epochs, values, marker="o", label=key)
            ax.set_xlabel("epoch")
            ax.set_ylabel(name)
            ax.set_title(name)
            ax.legend()
        fig.tight_layout()
        if path is not None:
            fig.savefig(path)
        _inline_in_notebooks(Figure)
        return fig


def _inline_in_notebooks(figure_type) -> None:
    """In a Jupyter kernel, make a Figure that ends a cell show as a picture (what
    ``%matplotlib inline`` does for pyplot's figures; ours are made without pyplot)."""
    import sys
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    if shell is None or not hasattr(shell, "kernel"):
        return
    png = shell.display_formatter.formatters["image/png"]
    if figure_type not in png.type_printers:
        def render(fig):
            import io
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", bbox_inches="tight")
            return buffer.getvalue()
        png.for_type(figure_type, render)


class ProgressBar(Callback):
    """A tqdm bar per epoch (worker 0 only), with the epoch's figures at its end."""

    def on_epoch_begin(self, run, epoch):
        self.bar = None
        if run.rank == 0:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=run.steps, desc=f"epoch {epoch + 1}/{run.epochs}", leave=True,
                            initial=run.start_batch if epoch == run.start else 0)

    def on_batch_end(self, run, batch, logs):
        if self.bar is not None:
            self.bar.update(1)

    def on_epoch_end(self, run, epoch, logs):
        if self.bar is not None:
            self.bar.set_postfix_str(format_logs(logs))
            self.bar.close()

    def on_exception(self, run, exc):
        if getattr(self, "bar", None) is not None:
            self.bar.close()


class EpochLogger(Callback):
    """One line per epoch from worker 0 (``epoch 3/15: loss=...``), what fit shows without a
    terminal: logged at INFO on the ``gluondist`` logger, and on stderr too when logging would
    not show it (see :mod:`~gluondist.training.console`). ``time_split=True`` adds where the
    epoch's time went (waiting for data, computing, waiting for the kvstore)."""

    def __init__(self, time_split: bool = False):
        self.time_split = time_split

    def on_epoch_end(self, run, epoch, logs):
        if run.rank == 0:
            say(log, f"epoch {epoch + 1}/{run.epochs}: {format_logs(logs, self.time_split)}")


class Checkpointer(Callback):
    """After every epoch (and every ``checkpoint_every`` steps of fit), worker 0 writes a
    checkpoint to ``directory`` (see :mod:`gluondist.checkpoint`): parameters, optimizer
    state, history, RNG and callback states. The step takes host copies and training goes on
    while a thread writes them (:class:`gluondist.snapshot.Writer`: one write at a time, a
    failed write raised at the next step). When fit ends, the last write is complete on every
    worker's return (in a job the others wait for worker 0's). fit adds one for
    ``checkpoint_dir`` and resumes from it, or from the directory of the one you pass."""

    def __init__(self, directory):
        self.directory = directory
        self._writer = None

    def on_train_begin(self, run):
        from ..snapshot import Writer
        self._writer = Writer(self.directory) if run.rank == 0 else None

    # a step checkpoint's parameters that are NaN or infinite are refused by the writer (a
    # FloatingPointError, raised at a later step as any failed write is), checked on its
    # copies rather than in the training thread; fit sets it for terminate_on_nan
    refuse_non_finite = False

    def save(self, run, epoch: int, batch: Optional[int] = None, sums=None) -> None:
        """Checkpoint the end of ``epoch`` or, with ``batch``, its first ``batch`` batches
        (``sums``: the epoch's running sums so far, see RunState)."""
        from .. import checkpoint
        if self._writer is not None:
            trainer = None if run.updates_on_servers else run.trainer  # the servers hold it
            state = checkpoint.RunState.capture(run, batch, sums)

            def take(spare):
                snapshot = checkpoint.take(epoch, run.net, trainer, state,
                                           run.callbacks.state_arrays(), spare)
                check = self.refuse_non_finite and batch is not None  # epoch ends: fit's own
                snapshot.finite_of = run.epochs if check else None
                return snapshot
            self._writer.submit(epoch, batch, take)

    def raise_failed(self) -> None:
        """Raise the error of a background write that failed (fit asks at every step)."""
        if self._writer is not None:
            self._writer.raise_failed()

    def on_epoch_end(self, run, epoch, logs):
        self.save(run, epoch)

    def on_train_end(self, run):
        if self._writer is not None:
            self._writer.drain()
        # no worker reads the directory (a next fit) before worker 0's last write is complete;
        # dist_async workers, which stop at different epochs, meet here too
        if run.agree or run.updates_on_servers:
            from .. import kvstore
            kvstore.barrier()

    def on_exception(self, run, exc):
        # the checkpoint being written is completed (a resize's exit, an error, Ctrl-C alike):
        # it is the one the next start resumes from
        if self._writer is not None:
            try:
                self._writer.drain()
            except Exception as failed:
                log.error("%s", failed)


class StopAgreement(Callback):
    """Makes a stop requested on any worker of a ``dist_sync`` job the decision of all of them
    (one stopping alone would leave the others blocked in push), before the epoch's checkpoint
    records it. fit places it after the user's callbacks; in one process it does nothing."""

    def on_epoch_end(self, run, epoch, logs):
        # the launcher's request to resize (gluondist.elastic) is agreed on alike
        asked = [float(run.stop_training), float(elastic.requested())]
        if run.agree:
            from ..kvstore import allreduce
            asked = list(allreduce(asked))
        run.stop_training, run.resizing = (bool(a > 0) for a in asked)


class Heartbeat(Callback):
    """Tells the launcher each finished batch, for its stall detection (a no-op elsewhere)."""

    def on_batch_end(self, run, batch, logs):
        heartbeat.beat()
