"""Parameter-server mode: this process's place in the job, the kvstore, a trainer and a sampler
that are correct together. The parts live in :mod:`gluondist.kv.node` (identity, the kvstore, the
collectives), :mod:`gluondist.kv.trainer` and :mod:`gluondist.kv.sampling`; this module is their one
public door.

What the copied recipes get wrong, and what is done here instead:

* A dist kvstore's servers *sum* the workers' gradients, so ``Trainer.step`` must get the
  *global* batch size (local size x workers) to apply the mean gradient.
* ``update_on_kvstore=True`` in sync modes hides ``set_learning_rate`` from the servers
  (apache/mxnet#15919) and makes ``save_states`` raise, so sync modes update locally;
  ``dist_async`` can only update on the servers.
* The first pull of the initial weights can race another worker's first gradient push and
  return the summed gradient: the trainer's kvstore is initialised, and every worker waits at a
  barrier, before the first forward pass.
* Workers that run different numbers of batches deadlock ``dist_sync`` (one blocks in push
  forever): :class:`ShardedBatchSampler` gives every worker the same count.
* MXNet has no ``kv.stop_server()``; servers stop when every worker's kvstore is destroyed at exit.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .kv.chunks import CHUNK_BYTES, CHUNKS_IN_FLIGHT, chunk_bounds  # noqa: F401
from .kv.kinds import DIST_KINDS, KINDS, Mode  # noqa: F401
from .kv.node import (MAX_KEY, MAX_REDUCE, NODE, REDUCE_BASE, REDUCE_CHUNK,  # noqa: F401
                      REDUCE_SAFE, is_distributed, reduce_keys, resolve_mode, role)
from .kv.sampling import ShardedBatchSampler  # noqa: F401
from .kv.trainer import TrainStep, make_trainer, parameter_chunks  # noqa: F401


def num_workers() -> int:
    """Number of workers in the job (1 outside a launched job)."""
    return NODE.num_workers()


def rank() -> int:
    """This worker's rank, 0 .. num_workers()-1 (0 outside a launched job).

    Once the distributed kvstore exists its rank is the truth; before that the launcher's rank
    (which it arranges to be the same) is used."""
    return NODE.rank()


def create(kind: Optional[str] = "auto", num_contexts: int = 1):
    """Create (or, for a distributed kind, return the one kept) kvstore.

    Returns an ``mx.kv.KVStore``, or None where ``kind='auto'`` needs none (one process, one
    device). Raises ValueError for an unknown kind and RuntimeError for a distributed kind
    outside a launched job (MXNet would otherwise wait forever for a scheduler)."""
    return NODE.create(kind, num_contexts)


def barrier() -> None:
    """Wait until every worker of the job is here (a no-op outside a distributed job)."""
    NODE.barrier()


def allreduce(values: Sequence[float]) -> np.ndarray:
    """Sum a vector of numbers over all workers (identity outside a distributed job).

    Used for metrics, flags and BatchNorm statistics that every worker must agree on, of any
    length up to MAX_REDUCE (about 2.4e9). All workers must call it the same number of times,
    with the same lengths."""
    return NODE.allreduce(values)


def allgather(values: Sequence[float]) -> np.ndarray:
    """Every worker's ``values``, as rows ``(num_workers, len(values))`` in rank order (just this
    process's row outside a distributed job). All workers must call it together."""
    return NODE.allgather(values)
