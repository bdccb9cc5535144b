"""Parameter-server mode: this process's place in the job, the kvstore, a trainer and a sampler
that are correct together.

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

import logging
import math
import os
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import envvars
from ._mx import mx

log = logging.getLogger(__name__)

from .kinds import DIST_KINDS, KINDS  # noqa: E402,F401  (kept as kvstore.KINDS, .DIST_KINDS)

_dist_kvstore = None  # MXNet allows one distributed kvstore per process: created once, reused


def role() -> Optional[str]:
    """This process's ps-lite role (``'worker'``, ``'server'``, ``'scheduler'``), or None when
    it was not started as part of a parameter-server job."""
    return os.environ.get(envvars.DMLC_ROLE) or None


def is_distributed() -> bool:
    """True in a worker of a launched parameter-server job."""
    return role() == "worker"


def num_workers() -> int:
    """Number of workers in the job (1 outside a launched job)."""
    if _dist_kvstore is not None:
        return _dist_kvstore.num_workers
    if is_distributed():
        return int(os.environ.get(envvars.DMLC_NUM_WORKER, "1"))
    return 1


def rank() -> int:
    """This worker's rank, 0 .. num_workers()-1 (0 outside a launched job).

    Once the distributed kvstore exists its rank is the truth; before that the launcher's rank
    (which it arranges to be the same) is used."""
    if _dist_kvstore is not None:
        return _dist_kvstore.rank
    if is_distributed():
        return int(os.environ.get(envvars.GLUONDIST_RANK, "0"))
    return 0


def resolve_kind(kind: str = "auto", num_contexts: int = 1) -> Optional[str]:
    """The kvstore kind ``kind`` stands for here, or None when no kvstore is needed.

    ``'auto'`` is the launcher's ``--kvstore`` (``dist_sync`` by default) inside a launched job,
    ``'device'`` for several devices in one process, and None for one device."""
    if kind is None:
        return None
    if kind != "auto" and kind not in KINDS:
        raise ValueError(f"unknown kvstore kind {kind!r}; use 'auto' or one of: {', '.join(KINDS)}")
    if kind == "auto":
        if is_distributed():
            kind = os.environ.get(envvars.GLUONDIST_KVSTORE) or "dist_sync"
        else:
            return "device" if num_contexts > 1 else None
    if kind in DIST_KINDS and not is_distributed():
        raise RuntimeError(
            f"kvstore {kind!r} needs a parameter-server job: start the script with "
            f"`gluondist launch -n WORKERS -s SERVERS script.py`, or use kvstore='auto'")
    return kind


def create(kind: str = "auto", num_contexts: int = 1):
    """Create (or, for a distributed kind, return the one cached) kvstore.

    Returns an ``mx.kv.KVStore``, or None where ``kind='auto'`` needs none (one process, one
    device). Raises ValueError for an unknown kind and RuntimeError for a distributed kind
    outside a launched job (MXNet would otherwise wait forever for a scheduler)."""
    global _dist_kvstore
    kind = resolve_kind(kind, num_contexts)
    if kind is None:
        return None
    if kind not in DIST_KINDS:
        return mx.kv.create(kind)
    if _dist_kvstore is not None:
        if _dist_kvstore.type != kind:
            raise RuntimeError(
                f"this process already has a {_dist_kvstore.type!r} kvstore and MXNet allows only "
                f"one distributed kvstore per process; use {_dist_kvstore.type!r} again")
        return _dist_kvstore
    _dist_kvstore = mx.kv.create(kind)
    expected = os.environ.get(envvars.GLUONDIST_RANK)
    if expected is not None and int(expected) != _dist_kvstore.rank:
        log.warning("launcher rank %s got kvstore rank %d (a port was taken at start); "
                    "gluondist.kvstore.rank() follows the kvstore", expected, _dist_kvstore.rank)
    return _dist_kvstore


def make_trainer(params, optimizer="sgd", optimizer_params=None, kvstore="auto",
                 num_contexts: int = 1, batch_size: Optional[int] = None):
    """A ``gluon.Trainer`` whose kvstore semantics are right, ready for the first step.

    ``kvstore`` is a kind (see :func:`create`) or a KVStore. Sync modes update on the workers
    (``update_on_kvstore=False``); ``dist_async`` on the servers. With a distributed kvstore the
    parameters must already be initialised with known shapes (run one forward pass first): they
    are broadcast from worker 0 and every worker waits at a barrier before this returns, so the
    first pull cannot race a gradient push. Call ``step()`` with the *global* batch size.

    ``dist_async`` applies each worker's gradient alone, with a scale fixed when the optimizer
    is sent to the servers (here): give ``batch_size``, the local size every ``step()`` uses."""
    kv = create(kvstore, num_contexts) if isinstance(kvstore, str) or kvstore is None else kvstore
    dist = kv is not None and "dist" in kv.type
    update_on_kvstore = None if kv is None else (dist and "async" in kv.type)
    trainer = mx.gluon.Trainer(params, optimizer, optimizer_params, kvstore=kv,
                               update_on_kvstore=update_on_kvstore)
    if dist:
        pending = [p.name for p in trainer._params if p._deferred_init]
        if pending:
            raise ValueError(
                f"parameters {', '.join(pending[:3])} have unknown shapes; run one forward pass "
                "(or give in_units) before make_trainer so worker 0 can broadcast them")
        if update_on_kvstore:
            if batch_size is None:
                raise ValueError("dist_async needs make_trainer(..., batch_size=LOCAL_BATCH): "
                                 "the servers fix the gradient scale when they get the optimizer")
            trainer._optimizer.rescale_grad = trainer._scale / batch_size
        # Trainer would do this lazily inside the first step(), after the forward pass; doing
        # it now and waiting closes the init-pull / gradient-push race described above.
        trainer._init_kvstore()
        trainer._init_params()
        mx.nd.waitall()
        kv._barrier()
    return trainer


def allreduce(values: Sequence[float], key: int = 1 << 30) -> np.ndarray:
    """Sum a short vector of numbers over all workers (identity outside a distributed job).

    Used for metrics and flags that every worker must agree on. All workers must call it the
    same number of times, with the same length."""
    values = np.asarray(values, dtype=np.float64)
    if _dist_kvstore is None:
        return values
    key = key + len(values)  # one key per length; a key's shape is fixed at init
    arr = mx.nd.array(values, dtype="float64")
    if key not in _allreduce_keys:
        _dist_kvstore.init(key, mx.nd.zeros_like(arr))
        _allreduce_keys.add(key)
    out = mx.nd.zeros_like(arr)
    _dist_kvstore.pushpull(key, arr, out=out)
    return out.asnumpy()


_allreduce_keys: set = set()


class ShardedBatchSampler:
    """Splits each *global* batch across workers so all run the same number of batches.

    Every epoch draws one permutation from ``seed + epoch`` (identical on every worker), cuts it
    into global batches of ``batch_size * num_workers`` and gives worker ``rank`` slice ``rank``
    of each. N workers with local batch b therefore see exactly the batches one process with
    batch N*b sees. The last, partial global batch is split as evenly as possible
    (``last_batch='keep'``; a worker's share may then be empty) or dropped
    (``last_batch='discard'``). Iterating yields this worker's index arrays, so it also works as
    a ``gluon.data.DataLoader(batch_sampler=...)`` with ``last_batch='discard'``."""

    def __init__(self, length: int, batch_size: int, num_workers: int = 1, rank: int = 0,
                 shuffle: bool = True, seed: int = 0, last_batch: str = "keep"):
        if length < 1:
            raise ValueError("the data set is empty")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not 0 <= rank < num_workers:
            raise ValueError(f"rank {rank} is outside 0..{num_workers - 1}")
        if last_batch not in ("keep", "discard"):
            raise ValueError(f"last_batch must be 'keep' or 'discard', got {last_batch!r}")
        self.length, self.batch_size = length, batch_size
        self.num_workers, self.rank = num_workers, rank
        self.shuffle, self.seed, self.last_batch = shuffle, seed, last_batch
        self.epoch = 0

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.num_workers

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n = self.length / self.global_batch_size
        return math.ceil(n) if self.last_batch == "keep" else int(n)

    def batches(self) -> Iterator[Tuple[np.ndarray, int]]:
        """Yield ``(local_indices, global_batch_count)`` for each global batch of the epoch."""
        if self.shuffle:
            order = np.random.RandomState(self.seed + self.epoch).permutation(self.length)
        else:
            order = np.arange(self.length)
        gbs = self.global_batch_size
        for start in range(0, len(self) * gbs, gbs):
            batch = order[start:start + gbs]
            if self.num_workers == 1:
                yield batch, len(batch)
            else:
                yield np.array_split(batch, self.num_workers)[self.rank], len(batch)

    def __iter__(self) -> Iterator[List[int]]:
        for local, _ in self.batches():
            yield local.tolist()


def train_parameter_server(net, X, y, epochs: int = 1, batch_size: int = 32, loss=None,
                           optimizer="sgd", optimizer_params=None, kvstore="auto",
                           seed: int = 0) -> List[float]:
    """Recipe 1 done right: train ``net`` on ``(X, y)`` in parameter-server mode.

    Runs as it is in one process, and under ``gluondist launch`` as one of N workers (each takes
    its slice of every global batch of ``batch_size * N``). Returns the mean training loss of
    each epoch over this worker's samples."""
    from . import parallel

    X, y = np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.float32)
    mx.random.seed(seed)
    loss = loss or mx.gluon.loss.SoftmaxCrossEntropyLoss()
    ctxs = [mx.cpu()]
    parallel.initialize(net, ctxs, sample=X[:1])  # shapes must be known before the sync
    trainer = make_trainer(net.collect_params(), optimizer,
                           optimizer_params or {"learning_rate": 0.1}, kvstore)
    sampler = ShardedBatchSampler(len(X), batch_size, num_workers(), rank(), seed=seed)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total, count = mx.nd.zeros((1,)), 0
        for idx, global_count in sampler.batches():
            empty = len(idx) == 0  # a share of the last global batch; still push (zeros)
            idx = idx if not empty else np.arange(1)
            _, batch_losses = parallel.forward_backward(
                net, loss, [mx.nd.array(X[idx])], [mx.nd.array(y[idx])], ctxs,
                scale=0.0 if empty else 1.0)
            trainer.step(global_count)  # servers sum all workers' gradients: divide by all
            if not empty:
                total += batch_losses[0].sum()  # one context: never None here
                count += len(idx)
        losses.append(total.asscalar() / max(count, 1))
    return losses
