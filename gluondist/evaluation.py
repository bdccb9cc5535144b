"""``gluondist.evaluate`` and ``gluondist.predict``, and the pass fit validates with."""
from __future__ import annotations

from typing import Tuple, Union

import numpy as np

from . import kvstore as kvs, parallel
from .data import check_count, source
from .objective import Objective, Tally, check_batch, forward, outputs_of


def run_pass(net, objective: Objective, src, ctxs, batch_size: int, rank: int = 0,
             workers: int = 1, allreduce=None) -> dict:
    """Loss and metrics over all of ``src`` (worker ``rank`` taking its share of each batch
    when ``allreduce`` sums the figures over ``workers``), without recording gradients."""
    tally = Tally(objective)
    sampler = kvs.ShardedBatchSampler(len(src), batch_size, workers, rank, shuffle=False,
                                      last_batch=src.last_batch)
    for count, _, data_parts, target_parts in src.epoch(sampler, ctxs):
        if count == 0:
            continue
        outputs = [forward(net, d) if d is not None else None for d in data_parts]
        losses = [objective(o, t) if o is not None else None
                  for o, t in zip(outputs, target_parts)]
        tally.add(outputs, target_parts, losses)
    return tally.logs(allreduce)


def evaluate(net, data, loss=None, metrics="auto", batch_size=None, ctx=None,
             loss_weights=None) -> dict:
    """The loss and each metric of a trained ``net`` on ``data`` (any kind fit takes), with the
    History's keys without ``val_``: computed exactly as fit's validation, so evaluating right
    after fit gives its last ``val_`` figures. In a launched ``dist_sync`` job every worker
    takes its share and all get the same dict (every worker must call it); in ``dist_async``
    each worker evaluates all of ``data``."""
    ctxs, src, batch_size = _setup(net, data, batch_size, ctx)
    objective = check_batch(net, None, src, "data", ctxs[0], batch_size, loss, loss_weights,
                            metrics)
    kind = kvs.resolve_kind("auto", len(ctxs))
    if kind in ("dist_sync", "dist_device_sync"):
        kv = kvs.create(kind, len(ctxs))
        return run_pass(net, objective, src, ctxs, batch_size, kv.rank, kv.num_workers,
                        kvs.allreduce)
    return run_pass(net, objective, src, ctxs, batch_size)


def predict(net, data, batch_size=None, ctx=None) -> Union[np.ndarray, Tuple[np.ndarray, ...]]:
    """``net``'s outputs for every sample of ``data``, in sample order, as a numpy array (a
    tuple of arrays for a net of several outputs). ``data``: an array of inputs, a tuple of
    them for several inputs, or a Dataset/DataLoader as for fit (labels are ignored). Runs in
    this process on its devices ``ctx``, in batches of ``batch_size`` (default 256)."""
    ctxs, src, batch_size = _setup(net, data, batch_size, ctx, labelled=False, default=256)
    sampler = kvs.ShardedBatchSampler(len(src), batch_size, shuffle=False)
    chunks = []
    for _, _, data_parts, _ in src.epoch(sampler, ctxs):
        parts = [outputs_of(forward(net, d)) for d in data_parts if d is not None]
        chunks.append([np.concatenate([p[j].asnumpy() for p in parts])
                       for j in range(len(parts[0]))])
    columns = [np.concatenate(col) for col in zip(*chunks)]
    return tuple(columns) if len(columns) > 1 else columns[0]


def _setup(net, data, batch_size, ctx, labelled=True, default=32):
    ctxs = parallel.contexts(ctx)
    if not parallel.is_initialized(net) or any(
            p._deferred_init for p in net.collect_params().values()):
        raise ValueError("the net has no trained parameters yet: train it with fit, load them "
                         "(net.load_parameters), or initialise it")
    parallel.initialize(net, ctxs)  # moved to ctxs, values kept
    src, loader_batch = source(data, "data", labelled=labelled)
    batch_size = batch_size or loader_batch or default
    check_count(batch_size, "batch_size", 1)
    return ctxs, src, batch_size

