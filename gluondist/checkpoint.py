"""Per-epoch checkpoints that a crash cannot corrupt and that cannot run code when read.

Layout of ``checkpoint_dir`` (plain MXNet reads every file; nothing is pickled)::

    ckpt-000007/        one complete checkpoint; the highest number is the newest
      net.params        the parameters: net.load_parameters("ckpt-000007/net.params")
      trainer.states    the optimizer's state arrays (momentum, Adam's moments): mx.nd.load()
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

import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from ._mx import mx

log = logging.getLogger(__name__)

FORMAT = 2
KEEP = 2
PARAMS, STATES, STATE, RUN = "net.params", "trainer.states", "state.json", "run.json"
CALLBACKS = "callbacks.params"
_NAME = re.compile(r"^ckpt-(\d{6,})$")


class Checkpoint:
    """A complete checkpoint read from disk: ``path``, ``epoch``, ``state`` (state.json),
    ``params`` and ``arrays`` (the optimizer's), as name -> NDArray."""

    def __init__(self, path: Path, state: dict, params: dict, arrays: dict,
                 callback_arrays: dict):
        self.path, self.state, self.epoch = path, state, state["epoch"]
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


def save(directory, epoch: int, net, trainer, state: dict,
         callback_arrays: Optional[dict] = None) -> Path:
    """Write the checkpoint of ``epoch``: ``net``'s parameters, ``trainer``'s optimizer state
    (None when the servers hold it, as in ``dist_async``), ``state`` (JSON-serialisable) and
    the callbacks' arrays (EarlyStopping's best weights). Returns its directory."""
    directory = Path(directory)
    number = _next_number(directory)
    final = directory / f"ckpt-{number:06d}"
    tmp = directory / f".{final.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    net.save_parameters(str(tmp / PARAMS))
    optimizer = _save_optimizer(trainer, tmp / STATES) if trainer is not None else None
    if callback_arrays:
        mx.nd.save(str(tmp / CALLBACKS), callback_arrays)
    with open(tmp / STATE, "w") as f:
        json.dump({"format": FORMAT, "epoch": epoch, "optimizer": optimizer, **state}, f)
    for path in tmp.iterdir():
        _fsync(path, os.O_RDONLY)
    _fsync(tmp, os.O_RDONLY)
    os.rename(tmp, final)
    _fsync(directory, os.O_RDONLY)
    for stray in directory.glob(".ckpt-*.tmp"):  # left by a writer killed mid-write
        shutil.rmtree(stray, ignore_errors=True)
    for old in _numbers(directory)[:-KEEP]:
        shutil.rmtree(directory / f"ckpt-{old:06d}", ignore_errors=True)
    return final


def start_fresh(directory) -> None:
    """Make the checkpoints already in ``directory`` an earlier run's: never resumed again."""
    directory = Path(directory)
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
            return _read(path)
        except (OSError, ValueError, mx.base.MXNetError) as exc:
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            log.warning("skipping checkpoint %s: %s", path, reason)
    return None


def restore_net(ckpt: Checkpoint, net) -> None:
    """Set ``net``'s parameters to the checkpoint's (on the devices it is already on)."""
    for name, param in net._collect_params_with_prefix().items():
        param.set_data(ckpt.params[name])


def restore_trainer(ckpt: Checkpoint, trainer) -> None:
    """Give ``trainer`` the checkpoint's optimizer state (update counts and state arrays)."""
    meta = ckpt.state.get("optimizer")
    if meta is None:
        return
    arrays = ckpt.arrays
    opt = trainer._optimizer
    opt.num_update = meta["num_update"]
    opt._all_index_update_counts = {int(d): {int(i): c for i, c in counts.items()}
                                    for d, counts in meta["update_counts"].items()}
    opt._index_update_count = opt._all_index_update_counts.setdefault(0, {})
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
    return {"num_update": opt.num_update, "states": states, "arrays": bool(arrays),
            "update_counts": {str(d): {str(i): c for i, c in counts.items()}
                              for d, counts in opt._all_index_update_counts.items()}}


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
    with open(path / STATE) as f:
        state = json.load(f)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"not a format-{FORMAT} gluondist checkpoint")
    for key, kind in (("epoch", int), ("seed", int), ("signature", list), ("history", dict),
                      ("rng", dict), ("callbacks", dict)):
        if not isinstance(state.get(key), kind):
            raise ValueError(f"{STATE} has no valid {key!r}")
    params = mx.nd.load(str(path / PARAMS))  # MXNet's binary format: arrays, never code
    if not isinstance(params, dict) or sorted([k, list(v.shape)] for k, v in params.items()) \
            != state["signature"]:
        raise ValueError(f"{PARAMS} does not hold the parameters {STATE} names")
    meta = state.get("optimizer")
    arrays = mx.nd.load(str(path / STATES)) if meta and meta.get("arrays") else {}
    callbacks = mx.nd.load(str(path / CALLBACKS)) if (path / CALLBACKS).is_file() else {}
    return Checkpoint(path, state, params, arrays, callbacks)


def _first_of_run(directory: Path) -> int:
    try:
        with open(directory / RUN) as f:
            return int(json.load(f)["first"])
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
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
