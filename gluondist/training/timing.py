"""Where an epoch's training time goes: waiting for data, computing, waiting for the kvstore.

The wait for the next batch is measured on every batch. MXNet runs operators asynchronously,
so the rest can only be read at a synchronisation point: every ``every``-th batch of the run
(counted over its epochs) is timed phase by phase with ``mx.nd.waitall()`` between the phases
(forward, backward and fit's sums; the push and pull of gradients; the local update), the
other batches run untouched. The epoch's time besides the data wait is divided between
compute and sync in the proportion measured on its sampled batches (an epoch without one: the
run's so far), so the three add up to the epoch's time (validation is not part of it). A few
sampled batches on a noisy machine make the proportion approximate.

Counted over the run, not each epoch: an epoch of 4 batches would otherwise stall one batch
in 4, not one in 10.
"""
from __future__ import annotations

import time
from typing import Dict, Iterator, Optional

from .._mx import mx

KEYS = ("data_seconds", "compute_seconds", "sync_seconds")
# Every 10th batch is timed phase by phase: its waitall() calls cost a pipeline stall each, so
# one batch in ten keeps that cost within a few percent while an epoch of 100 batches still
# gets 10 samples.
SAMPLE_EVERY = 10


class EpochClock:
    """One epoch's clock, for ``steps`` batches; ``before``: the run's previous epoch's, whose
    count of batches to the next sample carries on (the first sample falls in the middle of
    the first epoch, or of its first ``every`` batches). An epoch is split in the proportion
    of its own samples; one with none, in that of the run's so far."""

    def __init__(self, steps: int, every: int = SAMPLE_EVERY,
                 before: Optional["EpochClock"] = None):
        self.every = every
        self.data = 0.0
        self.sampled = {"compute": 0.0, "sync": 0.0}
        self.samples = 0
        self._run = dict(before._run) if before else {"compute": 0.0, "sync": 0.0}
        self._wait = before._wait if before else min(every, max(steps, 1)) // 2
        self._mark: Optional[float] = None

    def waiting(self, batches) -> Iterator:
        """``batches``, with the time spent waiting for each added to the data time."""
        iterator = iter(batches)
        while True:
            start = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            self.data += time.perf_counter() - start
            yield item

    def sample(self) -> Optional["EpochClock"]:
        """Start timing the next batch phase by phase if it is one of the sampled; returns the
        clock to ``lap`` (None for a batch that runs untimed)."""
        due, self._wait = self._wait == 0, self._wait - 1 if self._wait else self.every - 1
        if not due:
            return None
        mx.nd.waitall()  # the previous batches' work is not this batch's
        self.samples += 1
        self._mark = time.perf_counter()
        return self

    def lap(self, phase: str) -> None:
        """The time since the last mark, once the devices are idle, goes to ``phase``."""
        mx.nd.waitall()
        now = time.perf_counter()
        self.sampled[phase] += now - self._mark
        self._run[phase] += now - self._mark
        self._mark = now

    def split(self, epoch_seconds: float) -> Dict[str, float]:
        rest = max(epoch_seconds - self.data, 0.0)
        times = self.sampled if self.samples else self._run
        sampled = times["compute"] + times["sync"]
        sync = rest * times["sync"] / sampled if sampled else 0.0
        return {"data_seconds": self.data, "compute_seconds": rest - sync, "sync_seconds": sync}


def over_workers(split: Dict[str, float], allgather) -> Dict[str, float]:
    """The mean of each figure over the job's workers, and the figures of the slowest worker
    (the largest sum) as ``slowest_*`` with its rank as ``slowest_worker``; ``allgather`` gives
    every worker's row (:func:`gluondist.kvstore.allgather`)."""
    rows = allgather([split[k] for k in KEYS])
    slowest = int(rows.sum(axis=1).argmax())
    out = {k: float(mean) for k, mean in zip(KEYS, rows.mean(axis=0))}
    out.update({f"slowest_{k}": float(v) for k, v in zip(KEYS, rows[slowest])})
    out["slowest_worker"] = float(slowest)
    return out
