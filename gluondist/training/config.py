"""What fit checks of its arguments together, and of one batch of each data source, before
anything trains (each argument alone is checked by :class:`~.arguments.FitArgs`); kept as a
frozen :class:`FitConfig`."""
from __future__ import annotations

import copy
import os
import random
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Union

import numpy as np

from .. import kvstore as kvs, parallel
from .._mx import mx
from ..kv import compression
from ..kv.kinds import Mode
from .arguments import CLIP_KEY, DEFAULT_BATCH_SIZE, FitArgs
from .callbacks import Callback, Checkpointer
from .checks import last_line
from .data import Source, check_not_all_dropped, source
from .objective import Objective, check_batch


@dataclass(frozen=True, eq=False)
class FitConfig:
    """fit's arguments (``args``) and what fit made of them, all checked before training."""

    args: FitArgs
    ctxs: List[mx.Context]
    mode: Optional[Mode]  # the kvstore's (None without one)
    train: Source
    val: Optional[Source]
    batch_size: int  # per worker: the argument, the DataLoader's, or DEFAULT_BATCH_SIZE
    val_batch: int  # val_data's DataLoader's, else batch_size
    optimizer: Union[str, mx.optimizer.Optimizer]  # a name, or fit's own copy
    opt_params: Dict[str, Any]  # fit's own copy, without clip_global_norm
    clip: Optional[float]  # clip_global_norm
    objective: Objective
    callbacks: List[Callback]  # the user's
    checkpoint_dir: Optional[str]  # the argument's, or the Checkpointer's passed
    # what runs a batch, made by the parallel mode: the net, or (parallel='pipeline') the
    # Pipeline of its stages, whose batches are loaded in micro_batches parts, all on the last
    # stage (ctxs says so)
    model: Any = None
    copies: int = 1  # the net's copies on this worker: one per device, or one pipeline
    layout: Optional[parallel.ParallelMode] = None  # the mode of parallel=


def prepare(args: FitArgs) -> FitConfig:
    """Check what holds of the arguments together and one batch of each data source;
    initialise the net."""
    ctxs = parallel.contexts(args.ctx)
    layout = parallel.mode(args.parallel)
    _check_options(args, layout)
    copies = layout.copies(ctxs)
    mode = kvs.resolve_mode(args.kvstore, copies)
    layout.check(args, ctxs, mode)
    compression.check_mode(compression.parse(args.compression), mode)
    workers = kvs.num_workers() if mode is not None and mode.distributed else 1
    train, val, batch_size, val_batch = _sources(args, workers)
    optimizer, opt_params, clip = own_optimizer(args.optimizer, args.optimizer_params)
    callbacks = list(args.callbacks or [])
    checkpoint_dir = checkpoint_dir_of(args.checkpoint_dir, callbacks)
    _check_every(args.checkpoint_every, checkpoint_dir, mode)
    if args.seed is not None:
        seed_all(args.seed)
    model, ctxs = layout.prepare(args, ctxs, train, batch_size)
    objective = check_batch(model, None, train, "train_data", ctxs[0], batch_size, args.loss,
                            args.loss_weights, args.metrics, args.class_weight)
    if val is not None:
        check_batch(model, objective, val, "val_data", ctxs[0], val_batch)
    keys = objective.keys()
    keys += [f"val_{k}" for k in keys] if val is not None else []
    for cb in callbacks:
        cb.check(keys)
    return FitConfig(args=args, ctxs=ctxs, mode=mode, train=train, val=val,
                     batch_size=batch_size, val_batch=val_batch, optimizer=optimizer,
                     opt_params=opt_params, clip=clip, objective=objective, callbacks=callbacks,
                     checkpoint_dir=checkpoint_dir, model=model, copies=copies,
                     layout=layout)


def _check_options(args: FitArgs, layout: parallel.ParallelMode) -> None:
    """Refuse, in one line, arguments of another parallel mode than ``layout`` given."""
    defaults = {f.name: f.default for f in fields(FitArgs)}
    for other in parallel.MODES.values():
        foreign = [o for o in other.options if o not in layout.options]
        if any(getattr(args, o) != defaults[o] for o in foreign):
            raise ValueError(f"{' and '.join(foreign)} {other.options_text}: pass "
                             f"parallel={other.name!r} with them, or leave them out")


def _sources(args: FitArgs, workers: int):
    """``(train, val, batch_size, val_batch)``: validation keeps its DataLoader's batch size
    (else the training one), as evaluate does."""
    train, loader_batch = source(args.train_data, "train_data", args.class_weight)
    # as Keras: no class_weight in validation, so that evaluate() gives the same figures
    val, val_batch = source(args.val_data, "val_data") if args.val_data is not None \
        else (None, None)
    # never more than each worker's share of the data
    batch_size = args.batch_size or loader_batch or \
        max(1, min(DEFAULT_BATCH_SIZE, len(train) // workers))
    if batch_size * workers > len(train):
        raise ValueError(f"batch_size {batch_size} x {workers} worker(s) exceeds the "
                         f"{len(train)} training samples; lower batch_size")
    if val is not None:
        check_not_all_dropped(val, val_batch or batch_size, workers, "val_data")
    return train, val, batch_size, val_batch or batch_size


def own_optimizer(optimizer, optimizer_params):
    """``(optimizer, params, clip)``: fit's own copies of the optimizer (a name, or a copy of
    an instance) and its settings without ``clip_global_norm``, which is returned apart."""
    # fit's own copy: a stateful lr_scheduler (or optimizer) passed again starts alike
    params = copy.deepcopy(dict(optimizer_params or {}))
    clip = params.pop(CLIP_KEY, None)
    if isinstance(optimizer, mx.optimizer.Optimizer):
        if params:
            raise ValueError(f"optimizer_params {sorted(params)} given with an optimizer "
                             "instance: set them on the instance, or pass the optimizer's name")
        # its parameters (from an earlier Trainer) are not copied: a new Trainer sets them
        return copy.deepcopy(optimizer, {id(optimizer.param_dict): {}}), params, clip
    try:  # bad keywords and values fail now, with the optimizer's own message
        _dry_run(mx.optimizer.create(optimizer, **copy.deepcopy(params)))
    except (TypeError, ValueError, AttributeError, mx.base.MXNetError) as exc:
        raise ValueError(f"optimizer_params for {optimizer!r}: {last_line(exc)}") from exc
    return optimizer, params, clip


def _dry_run(opt) -> None:
    """One update of a throwaway weight: the optimizer's code meets its settings."""
    weight, grad = mx.nd.ones((2,)), mx.nd.ones((2,))
    opt.update_multi_precision(0, weight, grad, opt.create_state_multi_precision(0, weight))
    weight.wait_to_read()


def _check_every(every: Optional[int], checkpoint_dir: Optional[str], mode: Optional[Mode]):
    if every is None:
        return
    if checkpoint_dir is None:
        raise ValueError(f"checkpoint_every={every} needs a checkpoint_dir to write the "
                         "checkpoints to; pass checkpoint_dir= (a directory every worker sees)")
    if mode is not None and mode.updates_on_servers:
        raise ValueError(f"checkpoint_every needs workers that step together, but under "
                         f"{mode} each worker is at its own step; use dist_sync, or "
                         "leave checkpoint_every out (a checkpoint after each epoch)")


def checkpoint_dir_of(checkpoint_dir, callbacks: List[Callback]) -> Optional[str]:
    """The directory fit checkpoints to and resumes from: ``checkpoint_dir``, or that of the
    one Checkpointer passed (both given: they must be the same directory)."""
    mine = [cb for cb in callbacks if isinstance(cb, Checkpointer)]
    if len(mine) > 1:
        raise ValueError(f"callbacks holds {len(mine)} Checkpointers; pass one (fit resumes "
                         "from its directory)")
    if mine:
        given = mine[0].directory
        if checkpoint_dir is not None and \
                os.path.realpath(checkpoint_dir) != os.path.realpath(given):
            raise ValueError(f"checkpoint_dir {checkpoint_dir} and the Checkpointer's directory "
                             f"{given} differ; give one of them (fit resumes from the "
                             "Checkpointer's directory)")
        checkpoint_dir = given
    if checkpoint_dir is None:
        return None
    _check_directory(checkpoint_dir)
    return os.fspath(checkpoint_dir)


def _check_directory(directory) -> None:
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(f"checkpoint_dir {directory} is a file, not a directory; give the path "
                         "of a directory (it is created if missing)")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"checkpoint_dir {directory}: {exc.strerror}") from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"checkpoint_dir {directory} is not writable")


def seed_all(seed: int) -> None:
    """MXNet's, numpy's and Python's global RNGs (a Dataset transform may draw from any)."""
    mx.random.seed(int(seed))
    np.random.seed(int(seed))
    random.seed(int(seed))
