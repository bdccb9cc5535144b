"""Every worker's share of every global batch, so all workers run the same number of batches
(in ``dist_sync`` a worker with one batch more would block in push forever)."""
from __future__ import annotations

import math
from typing import Iterator, List, Optional, Tuple

import numpy as np


SHUFFLE, MXNET = 0, 1  # the streams derive_seed makes: the sampler's, MXNet's per worker
SEEDS = 2 ** 31  # every seed is in 0..SEEDS-1: MXNet's seed is a C int


def derive_seed(seed: int, stream: int, *path: int) -> int:
    """The one way gluondist makes a seed for a part of a run: ``stream`` (SHUFFLE, MXNET)
    and ``path`` (an epoch, a rank) are a SeedSequence's spawn key, so every stream and path
    gets its own (``seed`` 0 at epoch 1 is unlike ``seed`` 1 at epoch 0; a spawn key, unlike
    entropy, is not padded with zeros, so path (3,) is unlike (3, 0)); the same on every
    worker."""
    key = (stream, *path)
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1)[0]) % SEEDS


class ShardedBatchSampler:
    """Splits each *global* batch across workers so all run the same number of batches.

    Every epoch draws one permutation from ``derive_seed(seed, SHUFFLE, epoch)`` (identical on
    every worker), cuts it into global batches of ``batch_size * num_workers`` and gives worker
    ``rank`` slice ``rank`` of each. N workers with local batch b therefore see exactly the
    batches one process with batch N*b sees. ``global_batch_size`` fixes the global batch
    instead (an elastic job keeps its first start's when N changes): slices then differ by at
    most one sample. The last, partial global batch is split as evenly
    as possible (``last_batch='keep'``; a worker's share may then be empty) or dropped
    (``last_batch='discard'``).

    Iterating yields this worker's index lists, for a ``gluon.data.DataLoader(batch_sampler=
    ...)``. A DataLoader's loop cannot learn a batch's global count, nor that its share is
    empty (MXNet's batchify fails on one), so iterating takes full global batches only: with
    ``last_batch='discard'`` (or a length they divide) every share is non-empty and every step
    is ``step(sampler.global_batch_size)``; otherwise it raises ValueError before the first
    batch, on every worker alike. :meth:`batches` has no such limit."""

    def __init__(self, length: int, batch_size: int, num_workers: int = 1, rank: int = 0,
                 shuffle: bool = True, seed: int = 0, last_batch: str = "keep",
                 global_batch_size: Optional[int] = None):
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
        self.global_batch_size = global_batch_size or batch_size * num_workers
        if last_batch == "discard" and length < self.global_batch_size:
            raise ValueError(f"{length} samples hold no full global batch of "
                             f"{self.global_batch_size}: with last_batch='discard' every epoch "
                             "would be empty; give a smaller batch_size, or last_batch='keep'")
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Draw ``epoch``'s permutation; :meth:`batches` then starts after its first ``skip``
        global batches (a run resumed mid-epoch, whatever the worker count now)."""
        if not 0 <= skip <= len(self):
            raise ValueError(f"skip must be in 0..{len(self)} (the epoch's batches), got {skip}")
        self.epoch, self.skip = epoch, skip

    def __len__(self) -> int:
        n = self.length / self.global_batch_size
        return math.ceil(n) if self.last_batch == "keep" else int(n)

    def batches(self) -> Iterator[Tuple[np.ndarray, int]]:
        """Yield ``(local_indices, global_batch_count)`` for each global batch of the epoch
        (after the first ``skip`` of :meth:`set_epoch`)."""
        if self.shuffle:
            seed = derive_seed(self.seed, SHUFFLE, self.epoch)
            order = np.random.RandomState(seed).permutation(self.length)
        else:
            order = np.arange(self.length)
        gbs = self.global_batch_size
        for start in range(self.skip * gbs, len(self) * gbs, gbs):
            batch = order[start:start + gbs]
            if self.num_workers == 1:
                yield batch, len(batch)
            else:
                yield np.array_split(batch, self.num_workers)[self.rank], len(batch)

    def __iter__(self) -> Iterator[List[int]]:
        self._check_full_batches()
        for local, _ in self.batches():
            yield local.tolist()

    def _check_full_batches(self) -> None:
        gbs, left = self.global_batch_size, self.length % self.global_batch_size
        loop = ("loop over sampler.batches(), which gives each batch's global count and may "
                "give an empty share")
        if self.last_batch == "keep" and left:
            raise ValueError(f"ShardedBatchSampler as a DataLoader's batch_sampler: "
                             f"{self.length} samples in global batches of {gbs} leave {left} "
                             f"in a last, partial one, which a DataLoader's loop cannot weigh; "
                             f"pass last_batch='discard', or {loop}")
        if gbs < self.num_workers:
            raise ValueError(f"ShardedBatchSampler as a DataLoader's batch_sampler: a global "
                             f"batch of {gbs} leaves some of the {self.num_workers} workers "
                             f"an empty share; give global_batch_size at least "
                             f"{self.num_workers}, or {loop}")
