"""``gluondist.evaluate`` and ``gluondist.predict``, and the pass fit validates with."""
from __future__ import annotations

from contextlib import closing
from typing import Dict, Tuple, Union

import numpy as np

from .. import kvstore as kvs, parallel
from .arguments import DEFAULT_BATCH_SIZE
from .checks import check_count, last_line
from .data import check_not_all_dropped, source
from .objective import (Objective, Tally, check_batch, check_float32, forward, named_inputs,
                        outputs_of, shapes_of)

SHARD_HINT = ("pass the whole dataset on every worker: fit and evaluate give each worker its "
              "share of every batch (data sharded by hand, such as X[rank::N], trains on a "
              "part of it, and with different batch counts dist_sync would hang)")


def differences(fields: Dict[str, float]) -> str:
    """``''`` when every worker of the job has the same ``fields``, else the differing ones
    with each rank's value ("train_data samples: worker 0 129, worker 1 128"). Every worker
    must call it together, with the same names."""
    names = list(fields)
    rows = kvs.allgather([float(fields[n]) for n in names])
    return "; ".join(
        f"{name}: " + ", ".join(f"worker {r} {_number(row[j])}" for r, row in enumerate(rows))
        for j, name in enumerate(names) if len(set(rows[:, j])) > 1)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def run_pass(net, objective: Objective, src, ctxs, batch_size: int, rank: int = 0,
             workers: int = 1, allreduce=None) -> dict:
    """Loss and metrics over all of ``src`` (worker ``rank`` taking its share of each batch
    when ``allreduce`` sums the figures over ``workers``), without recording gradients."""
    tally = Tally(objective)
    sampler = kvs.ShardedBatchSampler(len(src), batch_size, workers, rank, shuffle=False,
                                      last_batch=src.last_batch)
    with closing(src.epoch(sampler, ctxs)) as batches:  # an error stops its thread
        for count, _, data_parts, target_parts in batches:
            if count == 0:
                continue
            outputs = [forward(net, d) if d is not None else None for d in data_parts]
            losses = [objective(o, t) if o is not None else None
                      for o, t in zip(outputs, target_parts)]
            tally.add(outputs, target_parts, losses)
    logs = tally.logs(allreduce)
    parallel.settle(net)  # an inference pass: before the next training step
    return logs


def evaluate(net, data, loss=None, metrics="auto", batch_size=None, ctx=None,
             loss_weights=None) -> dict:
    """The loss and each metric of a trained ``net`` on ``data`` (any kind fit takes), with the
    History's keys without ``val_``: computed exactly as fit's validation, so evaluating right
    after fit gives its last ``val_`` figures. In a launched ``dist_sync`` job every worker
    takes its share and all get the same dict (every worker must call it); in ``dist_async``
    each worker evaluates all of ``data``. A :class:`gluondist.parallel.Pipeline` as ``net``
    runs on its stages' devices (``ctx`` is ignored)."""
    ctxs, src, batch_size = _setup(net, data, batch_size, ctx)
    objective = check_batch(net, None, src, "data", ctxs[0], batch_size, loss, loss_weights,
                            metrics)
    mode = kvs.resolve_mode("auto", len(ctxs))
    agree = mode is not None and mode.needs_agreement
    check_not_all_dropped(src, batch_size, kvs.num_workers() if agree else 1, "data")
    if agree:
        kv = kvs.create(mode, len(ctxs))
        differ = differences({"data samples": len(src), "batch_size": batch_size})
        if differ:
            raise ValueError(f"the workers called evaluate with different data ({differ}); "
                             f"{SHARD_HINT}")
        return run_pass(net, objective, src, ctxs, batch_size, kv.rank, kv.num_workers,
                        kvs.allreduce)
    return run_pass(net, objective, src, ctxs, batch_size)


def predict(net, data, batch_size=None, ctx=None) -> Union[np.ndarray, Tuple[np.ndarray, ...]]:
    """``net``'s outputs for every sample of ``data``, in sample order, as a numpy array (a
    tuple of arrays for a net of several outputs). ``data``: an array of inputs, a tuple of
    them for several inputs, or a Dataset/DataLoader as for fit (labels are ignored). Runs in
    this process on its devices ``ctx``, in batches of ``batch_size`` (default 256); a
    :class:`gluondist.parallel.Pipeline` as ``net`` on its stages' devices."""
    ctxs, src, batch_size = _setup(net, data, batch_size, ctx, labelled=False, default=256)
    _check_pairs(net, src)
    sampler = kvs.ShardedBatchSampler(len(src), batch_size, shuffle=False)
    chunks = []
    with closing(src.epoch(sampler, ctxs)) as batches:
        for _, _, data_parts, _ in batches:
            parts = [_predicted(net, d) for d in data_parts if d is not None]
            chunks.append([np.concatenate([p[j].asnumpy() for p in parts])
                           for j in range(len(parts[0]))])
    parallel.settle(net)
    columns = [np.concatenate(col) for col in zip(*chunks)]
    return tuple(columns) if len(columns) > 1 else columns[0]


def _check_pairs(net, src) -> None:
    """A Dataset of pairs ``(a, b)`` is ``(inputs, labels)`` to predict, which drops ``b``: say
    so rather than lose an input of a net that takes several."""
    sample = src.dataset[0] if hasattr(src, "dataset") else None
    inputs = named_inputs(net)
    if isinstance(sample, (tuple, list)) and len(sample) in (2, 3) and \
            not isinstance(sample[0], (tuple, list)) and inputs > 1:
        raise ValueError(f"predict reads each sample of {len(sample)} arrays as (inputs, "
                         f"labels{', weight' if len(sample) == 3 else ''}) and drops the labels,"
                         f" but the net takes {inputs} inputs: give samples ((x1, x2), y), or "
                         "pass the arrays (X1, X2)")


def _predicted(net, data) -> tuple:
    """The net's outputs on one part, read (MXNet reports a failed forward when read), or a
    ValueError in our words: predict takes the inputs alone."""
    try:
        out = outputs_of(forward(net, data))
        for o in out:
            o.wait_to_read()
        return out
    except Exception as exc:  # the user's forward: the cause stays chained
        shapes = shapes_of(data)
        hint = (" (a tuple is read as several inputs: give predict X alone, not (X, y))"
                if isinstance(data, tuple) else "")
        raise ValueError(f"net cannot take the inputs given to predict (shape {shapes}){hint}: "
                         f"{last_line(exc)}") from exc


def _setup(net, data, batch_size, ctx, labelled=True, default=DEFAULT_BATCH_SIZE):
    ctxs = parallel.contexts(ctx)
    if not parallel.is_initialized(net):  # deferred shapes are set by the first forward
        raise ValueError("the net has no parameters yet: train it with fit, load them "
                         "(net.load_parameters), or initialise them (net.initialize())")
    check_float32(net)
    ctxs = parallel.mode_of(net).eval_contexts(net, ctxs)  # a pipeline's: its last stage's
    src, loader_batch = source(data, "data", labelled=labelled)
    batch_size = batch_size or loader_batch or default
    check_count(batch_size, "batch_size", 1)
    return ctxs, src, batch_size

