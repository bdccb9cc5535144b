"""Checkpoints that a crash cannot corrupt and that cannot run code when read: at each epoch's
end, and within epochs with fit's ``checkpoint_every`` (written by :mod:`gluondist.snapshot`).

Layout of ``checkpoint_dir`` (plain MXNet reads every file; nothing is pickled)::

    ckpt-000007/        one complete checkpoint; the highest number is the newest
      net.params        the parameters: net.load_parameters("ckpt-000007/net.params")
      trainer.states    the optimizer's state arrays (momentum, Adam's moments): mx.nd.load();
                        absent for an optimizer without state (plain SGD)
      state.json        format, epoch (and within one: its batches trained, its running
                        sums), seed, history, RNG states, model signature, callback
                        states, the optimizer's update counts and which array is whose state
      callbacks.params  callbacks' arrays, e.g. EarlyStopping's best weights (when any)
    run.json            written by fit(resume=False): checkpoints numbered below its "first"
                        belong to an earlier run and are never resumed

A checkpoint is written into ``.ckpt-000007.<pid>.tmp/``, every file flushed to disk, and the
directory renamed into place: a process killed at any moment leaves every earlier checkpoint
intact (the stray temporary directory is removed by the next save). The two newest are kept.
Numbers only grow, across runs, so the newest is always the last one written. Only one process
(worker 0) writes to a directory. MXNet's own ``Trainer.save_states`` is not used: its file is
a pickle, which would run code when loaded.
"""
from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from . import _mx
from ._mx import mx
from .kv.updates import array_names, updates_of, valid_meta, whole as _int
from .devices import assign
from .kv.sampling import SEEDS
from .snapshot import (CALLBACKS, PARAMS, RUN, STATE, STATES, Snapshot, first_of_run, fsync,
                       next_number, numbers, read_json, regular)

log = logging.getLogger(__name__)

# 5: checkpoints within an epoch too ("batch", "sums"); 4, read as well, has the same seeds
# (4: the shuffle's per-epoch seed from numpy's SeedSequence too; 3: MXNet's only; 2: neither)
FORMAT = 5
READS = (4, 5)


@dataclass
class RunState:
    """The run's part of state.json, in one schema: what the Checkpointer writes
    (:meth:`capture`), what reading checks (:meth:`validate`) and what a resume restores
    (:meth:`apply`). The optimizer's part is written and restored by save/restore_trainer."""

    seed: int
    signature: list  # parameter names and shapes (see signature())
    history: Dict[str, list]
    rng: dict  # Python's and numpy's global RNG states (see rng_states())
    callbacks: Dict[str, dict]  # each callback's state_dict(), by CallbackList key
    # samples per step over all workers (None in checkpoints older than elastic jobs), which a
    # resume keeps whatever the worker count
    global_batch: Optional[int] = None
    # a checkpoint within an epoch (fit's checkpoint_every): the epoch's batches trained (None:
    # the epoch is complete) and the running sums of its loss and metrics so far (over all
    # workers of a dist_sync job), which the resumed epoch adds to its own
    batch: Optional[int] = None
    sums: Optional[List[float]] = None

    @classmethod
    def capture(cls, run, batch: Optional[int] = None,
                sums: Optional[List[float]] = None) -> "RunState":
        """The state of ``run`` (a :class:`gluondist.training.run.Run`) at the end of an epoch,
        or after ``batch`` of its batches with the epoch's running ``sums``."""
        return cls(seed=run.seed, signature=signature(run.net), history=run.history.history,
                   rng=rng_states(), callbacks=run.callbacks.state_dict(),
                   global_batch=run.global_batch, batch=batch, sums=sums)

    @classmethod
    def of(cls, state: dict) -> "RunState":
        """The run's fields of a state.json already checked by :meth:`validate`."""
        return cls(**{f.name: state[f.name] for f in fields(cls) if f.name in state})

    @staticmethod
    def validate(state: dict, need) -> None:
        """Every field fit reads, of the type and range it needs (``need(ok, what)`` raises)."""
        need(_int(state.get("seed"), 0, SEEDS - 1), "seed")
        need(isinstance(state.get("signature"), list), "signature")
        batch, sums = state.get("batch"), state.get("sums")
        need(batch is None or _int(batch, 1, 2 ** 62), "batch")
        need((sums is None) == (batch is None) and (sums is None or isinstance(sums, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in sums)), "sums")
        rows = state["epoch"] + (1 if batch is None else 0)  # the epochs complete
        history = state.get("history")
        need(isinstance(history, dict) and all(
            isinstance(v, list) and len(v) == rows and
            all(isinstance(x, (int, float)) for x in v) for v in history.values()), "history")
        rng = state.get("rng")
        need(isinstance(rng, dict) and _rng_ok(rng), "rng")
        need(isinstance(state.get("callbacks"), dict) and all(
            isinstance(v, dict) for v in state["callbacks"].values()), "callbacks")
        need(state.get("global_batch") is None or _int(state["global_batch"], 1, 2 ** 62),
             "global_batch")

    def apply(self, run, callback_arrays: dict) -> None:
        """Give a resumed ``run`` its History, its callbacks' states and the RNG states."""
        run.history.history = {k: list(v) for k, v in self.history.items()}
        run.history.epoch = list(range(run.start))
        run.callbacks.load_state_dict(self.callbacks, callback_arrays)
        set_rng_states(self.rng)


class Checkpoint:
    """A complete checkpoint read from disk: ``path``, ``epoch``, ``state`` (the
    :class:`RunState`), ``optimizer`` (its part of state.json, or None), ``params`` and
    ``arrays`` (the optimizer's), as name -> NDArray."""

    def __init__(self, path: Path, state: dict, params: dict, arrays: dict,
                 callback_arrays: dict):
        self.path, self.epoch, self.optimizer = path, state["epoch"], state["optimizer"]
        self.state = RunState.of(state)
        self.batch = self.state.batch  # None: the end of ``epoch``, else its batches trained
        self.params, self.arrays, self.callback_arrays = params, arrays, callback_arrays


def signature(net) -> List[list]:
    """Parameter names and shapes: what a checkpoint must match to be this model's."""
    return sorted([name, list(p.shape)] for name, p in _mx.named_parameters(net).items())


def rng_states() -> dict:
    """Python's and numpy's global RNG states as JSON (for user code that draws from them)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss],
            "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}


def set_rng_states(states: dict) -> None:
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def save(directory, epoch: int, net, trainer, state: RunState,
         callback_arrays: Optional[dict] = None) -> Path:
    """Write the checkpoint of the end of ``epoch`` now: ``net``'s parameters (each one's
    first device copy: in a data-parallel step every copy is equal), ``trainer``'s
    optimizer state (None when the servers hold it, as in ``dist_async``), the run's ``state``
    and the callbacks' arrays (EarlyStopping's best weights). Returns its directory. (fit
    writes through :class:`gluondist.snapshot.Writer`, in the background.)"""
    return take(epoch, net, trainer, state, callback_arrays).write(directory)


def take(epoch: int, net, trainer, state: RunState, callback_arrays: Optional[dict] = None,
         spare: Optional[Snapshot] = None) -> Snapshot:
    """A :class:`~gluondist.snapshot.Snapshot` of the run at the end of ``epoch`` or, when
    ``state.batch`` is set, after that many of its batches (``spare``: see Snapshot.take)."""
    return Snapshot.take(epoch, state.batch, net, trainer,
                         {"format": FORMAT, "epoch": epoch, **asdict(state)}, callback_arrays,
                         spare)


def start_fresh(directory) -> None:
    """Make the checkpoints already in ``directory`` an earlier run's: never resumed again."""
    directory = Path(directory)
    if (directory / RUN).exists() and not (directory / RUN).is_file():
        raise ValueError(f"{directory / RUN} is not a regular file; remove it")
    tmp = directory / f".{RUN}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"format": FORMAT, "first": next_number(directory)}, f)
    fsync(tmp)
    os.replace(tmp, directory / RUN)
    fsync(directory)


def load_latest(directory) -> Optional[Checkpoint]:
    """The newest complete checkpoint of the current run in ``directory``, or None. A
    checkpoint that cannot be read is skipped with a warning naming it; nothing in it runs."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    for stale in sorted(directory.glob("epoch-*.ckpt")):
        log.warning("ignoring %s: a checkpoint of gluondist 0.1 (a pickle, never loaded); "
                    "delete it or use another checkpoint_dir", stale)
    first = first_of_run(directory)
    for number in reversed(numbers(directory)):
        if number < first:
            break
        path = directory / f"ckpt-{number:06d}"
        try:
            state = read_json(path / STATE)
        except (OSError, ValueError, RecursionError):
            state = None  # named by _read below
        earlier = state.get("format") if isinstance(state, dict) else None
        if isinstance(earlier, int) and not isinstance(earlier, bool) and 2 <= earlier < READS[0]:
            raise ValueError(f"{path} was written by an earlier gluondist (checkpoint format "
                             f"{earlier}, whose per-epoch seeds differ, so it would not "
                             "resume exactly); pass resume=False to start a fresh run there")
        try:
            return _read(path)
        except (OSError, ValueError, TypeError, KeyError, OverflowError, RecursionError,
                mx.base.MXNetError) as exc:  # whatever a planted or damaged file can cause
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            log.warning("skipping checkpoint %s: %s", path, reason[:300])
    return None


def restore_net(ckpt: Checkpoint, net) -> None:
    """Set ``net``'s parameters to the checkpoint's (on the devices it is already on); a
    checkpoint of another model (other parameter names or shapes) is a ValueError."""
    if ckpt.state.signature != signature(net):
        mine = {name: shape for name, shape in signature(net)}
        theirs = {name: shape for name, shape in ckpt.state.signature}
        odd = sorted(n for n in mine.keys() | theirs.keys() if mine.get(n) != theirs.get(n))
        raise ValueError(
            f"{ckpt.path} holds a checkpoint of a different model (parameters that differ: "
            f"{', '.join(f'{n} {theirs.get(n)} there, {mine.get(n)} here' for n in odd[:3])}"
            f"{', ...' if len(odd) > 3 else ''}); restore it into the model that wrote it, or "
            "give this one a directory of its own")
    for name, param in _mx.named_parameters(net).items():
        assign(param, ckpt.params[name])


def restore_trainer(ckpt: Checkpoint, trainer) -> None:
    """Give ``trainer`` (make_trainer's, or any ``gluon.Trainer``) the checkpoint's optimizer state (update counts and
    state arrays); every device's copy gets the same, also when this run has more devices than
    the one that wrote the checkpoint."""
    meta, updates = ckpt.optimizer, updates_of(trainer)
    if meta is None or updates is None:
        return
    kind = type(trainer.optimizer).__name__
    if meta["type"] != kind:
        raise ValueError(f"the checkpoint in {ckpt.path.parent} holds the state of a "
                         f"{meta['type']} optimizer, not {kind}; train with the "
                         "same optimizer, or pass resume=False to start a fresh run")
    updates.load(meta, ckpt.arrays)


def _read(path: Path) -> Checkpoint:
    """Read and check one checkpoint directory; ValueError (or OSError, MXNetError) names what
    is wrong. Only regular files are opened: a FIFO planted there would block forever."""
    state = read_json(path / STATE)
    _check_state(state)
    params = mx.nd.load(str(regular(path / PARAMS)))  # MXNet's binary format: never code
    if not isinstance(params, dict) or sorted([k, list(v.shape)] for k, v in params.items()) \
            != state["signature"]:
        raise ValueError(f"{PARAMS} does not hold the parameters {STATE} names")
    meta = state["optimizer"]
    arrays = mx.nd.load(str(regular(path / STATES))) if meta and meta["arrays"] else {}
    callbacks = mx.nd.load(str(regular(path / CALLBACKS))) if (path / CALLBACKS).exists() else {}
    if not isinstance(arrays, dict) or not isinstance(callbacks, dict):
        raise ValueError("its state arrays are not named")
    if meta and not array_names(meta["states"]) <= set(arrays):
        raise ValueError(f"{STATES} lacks arrays that {STATE} names")
    return Checkpoint(path, state, params, arrays, callbacks)


def _check_state(state) -> None:
    """Every field fit reads, of the type and range it needs."""
    def need(ok: bool, what: str):
        if not ok:
            raise ValueError(f"{STATE} has no valid {what}")

    need(isinstance(state, dict) and state.get("format") in READS,
         f"format ({' or '.join(map(str, READS))})")
    need(_int(state.get("epoch"), 0, 10 ** 9), "epoch")
    RunState.validate(state, need)
    meta = state.get("optimizer")
    need(meta is None or valid_meta(meta), "optimizer")


def _rng_ok(rng: dict) -> bool:
    try:
        version, internal, gauss = rng["python"]
        name, keys, pos, has_gauss, cached = rng["numpy"]
        return (_int(version, 0, 100) and isinstance(internal, list) and len(internal) == 625
                and all(_int(k, 0, 2 ** 32) for k in internal) and name == "MT19937"
                and isinstance(keys, list) and len(keys) == 624
                and all(_int(k, 0, 2 ** 32 - 1) for k in keys) and _int(pos, 0, 624)
                and _int(has_gauss, 0, 1) and isinstance(cached, (int, float))
                and (gauss is None or isinstance(gauss, float)))
    except (TypeError, ValueError, KeyError):
        return False
