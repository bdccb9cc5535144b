"""Per-epoch checkpoints that a crash cannot corrupt and that cannot run code when read.

Layout of ``checkpoint_dir`` (plain MXNet reads every file; nothing is pickled)::

    ckpt-000007/        one complete checkpoint; the highest number is the newest
      net.params        the parameters: net.load_parameters("ckpt-000007/net.params")
      trainer.states    the optimizer's state arrays (momentum, Adam's moments): mx.nd.load();
                        absent for an optimizer without state (plain SGD)
      state.json        format, epoch, seed, history, RNG states, model signature, callback
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

import errno
import json
import logging
import os
import random
import re
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from ._mx import mx
from .devices import assign
from .kv.sampling import SEEDS

log = logging.getLogger(__name__)

# 4: the shuffle's per-epoch seed from numpy's SeedSequence too (3: MXNet's only; 2: neither)
FORMAT = 4
KEEP = 2
PARAMS, STATES, STATE, RUN = "net.params", "trainer.states", "state.json", "run.json"
CALLBACKS = "callbacks.params"
_NAME = re.compile(r"^ckpt-(\d{6,})$")


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

    @classmethod
    def capture(cls, run) -> "RunState":
        """The state of ``run`` (a :class:`gluondist.training.run.Run`) at the end of an epoch."""
        return cls(seed=run.seed, signature=signature(run.net), history=run.history.history,
                   rng=rng_states(), callbacks=run.callbacks.state_dict(),
                   global_batch=run.global_batch)

    @classmethod
    def of(cls, state: dict) -> "RunState":
        """The run's fields of a state.json already checked by :meth:`validate`."""
        return cls(**{f.name: state[f.name] for f in fields(cls) if f.name in state})

    @staticmethod
    def validate(state: dict, need) -> None:
        """Every field fit reads, of the type and range it needs (``need(ok, what)`` raises)."""
        need(_int(state.get("seed"), 0, SEEDS - 1), "seed")
        need(isinstance(state.get("signature"), list), "signature")
        history = state.get("history")
        need(isinstance(history, dict) and all(
            isinstance(v, list) and len(v) == state["epoch"] + 1 and
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
        self.params, self.arrays, self.callback_arrays = params, arrays, callback_arrays


def signature(net) -> List[list]:
    """Parameter names and shapes: what a checkpoint must match to be this model's."""
    return sorted([name, list(p.shape)] for name, p in net._collect_params_with_prefix().items())


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
    """Write the checkpoint of ``epoch``: ``net``'s parameters, ``trainer``'s optimizer state
    (None when the servers hold it, as in ``dist_async``), the run's ``state`` and the
    callbacks' arrays (EarlyStopping's best weights). Returns its directory."""
    directory = Path(directory)
    number = _next_number(directory)
    final = directory / f"ckpt-{number:06d}"
    tmp = directory / f".{final.name}.{os.getpid()}.tmp"
    try:
        _write(tmp, epoch, net, trainer, state, callback_arrays)
    except (OSError, mx.base.MXNetError) as exc:  # a full disk, a quota, an I/O error
        reason = _reason(exc, directory)  # before the partial files free their space
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(f"cannot write the checkpoint of epoch {epoch + 1} to {directory}: "
                      f"{reason}; the earlier checkpoints are kept") from exc
    os.rename(tmp, final)
    _fsync(directory, os.O_RDONLY)
    for stray in directory.glob(".ckpt-*.tmp"):  # left by a writer killed mid-write
        shutil.rmtree(stray, ignore_errors=True)
    for old in _numbers(directory)[:-KEEP]:
        shutil.rmtree(directory / f"ckpt-{old:06d}", ignore_errors=True)
    return final


def _write(tmp: Path, epoch: int, net, trainer, state: RunState, callback_arrays) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    net.save_parameters(str(tmp / PARAMS))
    optimizer = _save_optimizer(trainer, tmp / STATES) if trainer is not None else None
    if callback_arrays:
        mx.nd.save(str(tmp / CALLBACKS), callback_arrays)
    with open(tmp / STATE, "w") as f:
        json.dump({"format": FORMAT, "epoch": epoch, "optimizer": optimizer, **asdict(state)}, f)
    for path in tmp.iterdir():
        _fsync(path, os.O_RDONLY)
    _fsync(tmp, os.O_RDONLY)


def _reason(exc: BaseException, directory: Path) -> str:
    """What went wrong in words: MXNet's writer says only "FileStream.Write incomplete"."""
    if getattr(exc, "errno", None) == errno.ENOSPC:
        return "no space left on device"
    try:
        if shutil.disk_usage(directory).free < (1 << 20):
            return "no space left on device"
    except OSError:
        pass
    return getattr(exc, "strerror", None) or str(exc).strip().splitlines()[-1][:200]


def start_fresh(directory) -> None:
    """Make the checkpoints already in ``directory`` an earlier run's: never resumed again."""
    directory = Path(directory)
    if (directory / RUN).exists() and not (directory / RUN).is_file():
        raise ValueError(f"{directory / RUN} is not a regular file; remove it")
    tmp = directory / f".{RUN}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"format": FORMAT, "first": _next_number(directory)}, f)
    _fsync(tmp, os.O_RDONLY)
    os.replace(tmp, directory / RUN)
    _fsync(directory, os.O_RDONLY)


def load_latest(directory) -> Optional[Checkpoint]:
    """The newest complete checkpoint of the current run in ``directory``, or None. A
    checkpoint that cannot be read is skipped with a warning naming it; nothing in it runs."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    for stale in sorted(directory.glob("epoch-*.ckpt")):
        log.warning("ignoring %s: a checkpoint of gluondist 0.1 (a pickle, never loaded); "
                    "delete it or use another checkpoint_dir", stale)
    first = _first_of_run(directory)
    for number in reversed(_numbers(directory)):
        if number < first:
            break
        path = directory / f"ckpt-{number:06d}"
        try:
            state = _json(path / STATE)
        except (OSError, ValueError, RecursionError):
            state = None  # named by _read below
        earlier = state.get("format") if isinstance(state, dict) else None
        if isinstance(earlier, int) and not isinstance(earlier, bool) and 2 <= earlier < FORMAT:
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
    """Set ``net``'s parameters to the checkpoint's (on the devices it is already on)."""
    for name, param in net._collect_params_with_prefix().items():
        assign(param, ckpt.params[name])


def restore_trainer(ckpt: Checkpoint, trainer) -> None:
    """Give ``trainer`` the checkpoint's optimizer state (update counts and state arrays)."""
    meta = ckpt.optimizer
    if meta is None:
        return
    arrays = ckpt.arrays
    opt = trainer._optimizer
    if meta["type"] != type(opt).__name__:
        raise ValueError(f"the checkpoint in {ckpt.path.parent} holds the state of a "
                         f"{meta['type']} optimizer, not {type(opt).__name__}; train with the "
                         "same optimizer, or pass resume=False to start a fresh run")
    opt.num_update = meta["num_update"]
    counts = {int(i): c for i, c in meta["update_counts"].items()}
    # Every device's copy is updated alike (sync modes): each gets the same counts, also when
    # this run has more devices than the one that wrote the checkpoint.
    opt._all_index_update_counts = {c.device_id: dict(counts) for c in trainer._contexts}
    opt._index_update_count = opt._all_index_update_counts[trainer._contexts[0].device_id]
    for updater in trainer._updaters:
        updater.states = {int(i): _unflatten(tree, arrays) for i, tree in meta["states"].items()}
        updater.states_synced = dict.fromkeys(updater.states, False)  # moved to each device


def _save_optimizer(trainer, path: Path) -> Optional[dict]:
    if trainer._kvstore is not None and trainer._update_on_kvstore:
        return None  # the servers hold the state (dist_async)
    arrays: Dict[str, "mx.nd.NDArray"] = {}
    states = {str(i): _flatten(s, str(i), arrays)
              for i, s in (trainer._updaters[0].states.items() if trainer._updaters else ())}
    if arrays:
        mx.nd.save(str(path), arrays)
    opt = trainer._optimizer
    counts = opt._all_index_update_counts.get(trainer._contexts[0].device_id, {})
    return {"type": type(opt).__name__, "num_update": opt.num_update, "states": states,
            "arrays": bool(arrays), "update_counts": {str(i): c for i, c in counts.items()}}


def _flatten(state, key: str, arrays: dict):
    """A JSON tree for an updater state: null, {"array": name} or a list of trees."""
    if state is None:
        return None
    if isinstance(state, mx.nd.NDArray):
        arrays[key] = state
        return {"array": key}
    if isinstance(state, (tuple, list)):
        return [_flatten(s, f"{key}.{j}", arrays) for j, s in enumerate(state)]
    raise ValueError(f"cannot checkpoint an optimizer state of type {type(state).__name__}")


def _unflatten(tree, arrays):
    if tree is None:
        return None
    if isinstance(tree, dict):
        return arrays[tree["array"]].copy()
    return tuple(_unflatten(t, arrays) for t in tree)


def _read(path: Path) -> Checkpoint:
    """Read and check one checkpoint directory; ValueError (or OSError, MXNetError) names what
    is wrong. Only regular files are opened: a FIFO planted there would block forever."""
    state = _json(path / STATE)
    _check_state(state)
    params = mx.nd.load(str(_regular(path / PARAMS)))  # MXNet's binary format: never code
    if not isinstance(params, dict) or sorted([k, list(v.shape)] for k, v in params.items()) \
            != state["signature"]:
        raise ValueError(f"{PARAMS} does not hold the parameters {STATE} names")
    meta = state["optimizer"]
    arrays = mx.nd.load(str(_regular(path / STATES))) if meta and meta["arrays"] else {}
    callbacks = mx.nd.load(str(_regular(path / CALLBACKS))) if (path / CALLBACKS).exists() else {}
    if not isinstance(arrays, dict) or not isinstance(callbacks, dict):
        raise ValueError("its state arrays are not named")
    if meta and not _names(meta["states"]) <= set(arrays):
        raise ValueError(f"{STATES} lacks arrays that {STATE} names")
    return Checkpoint(path, state, params, arrays, callbacks)


def _regular(path: Path) -> Path:
    if not path.is_file():  # False for a FIFO, a directory, a missing file
        raise ValueError(f"{path.name} is not a regular file")
    return path


def _json(path: Path):
    with open(_regular(path)) as f:
        return json.load(f)


def _check_state(state) -> None:
    """Every field fit reads, of the type and range it needs."""
    def need(ok: bool, what: str):
        if not ok:
            raise ValueError(f"{STATE} has no valid {what}")

    need(isinstance(state, dict) and state.get("format") == FORMAT, f"format {FORMAT}")
    need(_int(state.get("epoch"), 0, 10 ** 9), "epoch")
    RunState.validate(state, need)
    meta = state.get("optimizer")
    need(meta is None or (isinstance(meta, dict) and isinstance(meta.get("type"), str) and
                          _int(meta.get("num_update"), 0, 2 ** 62) and
                          isinstance(meta.get("arrays"), bool) and
                          isinstance(meta.get("states"), dict) and
                          isinstance(meta.get("update_counts"), dict) and
                          all(_int(c, 0, 2 ** 62) for c in meta["update_counts"].values()) and
                          all(k.isdigit() for k in [*meta["states"], *meta["update_counts"]])),
         "optimizer")


def _int(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


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


def _names(tree) -> set:
    """The array names a JSON state tree refers to."""
    if isinstance(tree, dict) and set(tree) == {"array"} and isinstance(tree["array"], str):
        return {tree["array"]}
    if isinstance(tree, dict):
        return set().union(*map(_names, tree.values())) if tree else set()
    if isinstance(tree, list):
        return set().union(*map(_names, tree)) if tree else set()
    if tree is None:
        return set()
    raise ValueError(f"{STATE}: an optimizer state that is not an array: {tree!r}"[:200])


def _first_of_run(directory: Path) -> int:
    if not (directory / RUN).exists():
        return 0
    try:
        first = _json(directory / RUN)["first"]
        if not _int(first, 0, 10 ** 9):
            raise ValueError(f"'first' is {first!r}, not a checkpoint number")
        return first
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        log.warning("ignoring %s: %s", directory / RUN, exc)
        return 0


def _next_number(directory: Path) -> int:
    numbers = _numbers(directory) if directory.is_dir() else []
    return max([_first_of_run(directory) - 1, *numbers], default=-1) + 1


def _numbers(directory: Path) -> List[int]:
    return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(directory)) if m)


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
