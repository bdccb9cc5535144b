"""Is the job stalled? Per worker, the last time it made progress: a new batch count from its
heartbeat or, for a worker that never sent one, a second in which its process tree used CPU."""
from __future__ import annotations

import time
from typing import Dict, List, Optional

from ..heartbeat import INTERVAL
from .process import Child
from .transports import Transport

CPU_SAMPLE = 1.0  # seconds between CPU readings of a worker without a heartbeat
CPU_BUSY = 0.05  # CPU seconds per sample that count as progress (5% of a core)


class StallWatch:
    def __init__(self, timeout: float, transport: Transport, workers: List[Child]):
        self.timeout, self.transport, self.workers = timeout, transport, workers
        now = time.monotonic()
        self.started = now
        self.last: Dict[str, float] = {c.spec.label: now for c in workers}
        self._cpu: Dict[str, Optional[float]] = {}
        self._sampled = now
        self._checking = False

    def _progress_at(self, child: Child) -> float:
        if child.batches is not None:
            return max(child.batches_at, self.last[child.spec.label])
        return self.last[child.spec.label]

    def check(self, now: float) -> Optional[float]:
        """Seconds since the last progress of any running worker, once past the timeout.
        Called from the moment the job formed: the clock starts then."""
        if not self._checking:
            self._checking = True
            self.last = dict.fromkeys(self.last, now)
        if now - self._sampled >= CPU_SAMPLE:
            self._sample(now)
        running = [c for c in self.workers if c.exited is None]
        if not running:
            return None
        idle = now - max(self._progress_at(c) for c in running)
        return idle if idle > self.timeout else None

    def _sample(self, now: float) -> None:
        self._sampled = now
        if not self.transport.tree_cpu_known:
            return
        for child in self.workers:
            if child.batches is not None or child.exited is not None:
                continue
            cpu = self.transport.tree_cpu(child)
            before = self._cpu.get(child.spec.label)
            self._cpu[child.spec.label] = cpu
            # a trickle (a polling thread) never adds up to progress: each sample on its own
            if cpu is not None and before is not None and cpu - before >= CPU_BUSY:
                self.last[child.spec.label] = now

    def order(self) -> List[Child]:
        """Running workers, the one that stopped first first: fewest batches reported, then the
        earliest last progress (a worker without a heartbeat after those with one)."""
        running = [c for c in self.workers if c.exited is None]
        return sorted(running, key=lambda c: (c.batches is None, c.batches or 0,
                                              self._progress_at(c)))

    def told_apart(self, first: Child, second: Child) -> bool:
        """Whether the heartbeats show ``first`` stopped before ``second`` (fewer batches, or
        its last one clearly earlier than a report interval)."""
        if first.batches is None or second.batches is None:
            return False
        return first.batches < second.batches or \
            self._progress_at(second) - self._progress_at(first) > 2 * INTERVAL

    def describe(self, child: Child, now: float) -> str:
        ago = now - self._progress_at(child)
        if child.batches is not None:
            return f"{child.batches} batches, the last {ago:.0f}s ago"
        return f"no heartbeat; CPU idle for {ago:.0f}s"
