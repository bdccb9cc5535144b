"""What fit checks before anything trains: every argument and one batch of each data source,
kept as a frozen :class:`FitConfig`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import kvstore as kvs, parallel
from ..kv.kinds import Mode
from .arguments import check_callbacks, check_optimizer, checkpoint_dir_of, seed_all
from .checks import check_count
from .data import check_not_all_dropped, source
from .objective import check_batch, check_float32


@dataclass(frozen=True, eq=False)
class FitConfig:
    """What fit checked before anything trains."""

    net: object
    ctxs: list
    mode: Optional[Mode]
    train: object  # a data.Source
    val: object  # a data.Source, or None
    batch_size: int
    val_batch: int
    epochs: int
    optimizer: object
    opt_params: Optional[dict]
    clip: Optional[float]
    objective: object  # an objective.Objective
    callbacks: list
    checkpoint_dir: Optional[str]
    seed: Optional[int]
    accumulate: int


def prepare(*, net, train_data, loss, optimizer, optimizer_params, epochs, batch_size, ctx,
             kvstore, val_data, metrics, callbacks, checkpoint_dir, seed, accumulate,
             loss_weights, class_weight) -> FitConfig:
    """Check every argument and one batch of each data source; initialise the net."""
    ctxs = parallel.contexts(ctx)
    if kvstore is None and len(ctxs) > 1:
        raise ValueError(f"kvstore=None on {len(ctxs)} devices would train each device's copy "
                         "of the net on its own part of the batch (the copies drift apart); "
                         "use kvstore='auto' or 'device', or one device")
    mode = kvs.resolve_mode(kvstore, len(ctxs))
    workers = kvs.num_workers() if mode is not None and mode.distributed else 1
    train, val, batch_size, val_batch = _sources(train_data, val_data, batch_size, workers,
                                                 class_weight)
    check_count(epochs, "epochs", 0)
    check_count(accumulate, "accumulate", 1)
    optimizer, opt_params, clip = check_optimizer(optimizer, optimizer_params)
    callbacks = check_callbacks(callbacks)
    checkpoint_dir = checkpoint_dir_of(checkpoint_dir, callbacks)
    if seed is not None:
        seed_all(seed)
    check_float32(net)
    parallel.initialize(net, ctxs)
    objective = check_batch(net, None, train, "train_data", ctxs[0], batch_size, loss,
                            loss_weights, metrics, class_weight)
    if val is not None:
        check_batch(net, objective, val, "val_data", ctxs[0], val_batch)
    keys = objective.keys()
    keys += [f"val_{k}" for k in keys] if val is not None else []
    for cb in callbacks:
        cb.check(keys)
    return FitConfig(net=net, ctxs=ctxs, mode=mode, train=train, val=val, batch_size=batch_size,
                 val_batch=val_batch, epochs=epochs, optimizer=optimizer, opt_params=opt_params,
                 clip=clip, objective=objective, callbacks=callbacks,
                 checkpoint_dir=checkpoint_dir, seed=seed, accumulate=accumulate)


def _sources(train_data, val_data, batch_size, workers: int, class_weight):
    """``(train, val, batch_size, val_batch)``: validation keeps its DataLoader's batch size
    (else the training one), as evaluate does."""
    train, loader_batch = source(train_data, "train_data", class_weight)
    # as Keras: no class_weight in validation, so that evaluate() gives the same figures
    val, val_batch = source(val_data, "val_data") if val_data is not None else (None, None)
    if batch_size is None:  # Keras' default, but never more than each worker's share
        batch_size = loader_batch or max(1, min(32, len(train) // workers))
    check_count(batch_size, "batch_size", 1)
    if batch_size * workers > len(train):
        raise ValueError(f"batch_size {batch_size} x {workers} worker(s) exceeds the "
                         f"{len(train)} training samples; lower batch_size")
    if val is not None:
        check_not_all_dropped(val, val_batch or batch_size, workers, "val_data")
    return train, val, batch_size, val_batch or batch_size
