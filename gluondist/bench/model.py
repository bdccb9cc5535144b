"""The cost model of one ``dist_sync`` step: the bytes on every host's link, for the real
placement of workers and servers and MXNet's real placement of keys.

Every step each worker pushes every key to the server(s) that hold it and pulls it back. Bytes
between two processes of one host never reach its link. Each host has one full-duplex link of
the same rate B, so the step takes about as long as its busiest link direction needs:

    T = max over hosts h, directions d of (bytes(h, d) + fill(h, d)) / B

``fill(h, d)`` is the pipeline's start-up: a key's pull can start only once every worker's
push of that key has been summed, so the largest key part crossing ``h`` in ``d`` is waited for
once more. With one big key that doubles the time (push, then pull); with many small keys
(gradients in chunks) it is one chunk. B is calibrated from one measured row; on one host no
byte crosses a link and every row is predicted to take the calibration row's time.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ..kv import compression as cmp
# MXNet puts a small key k on server (k * 9973) % servers
from ..kv.chunks import DEFAULT_BIGARRAY_BOUND, SERVER_HASH



class _Wires(Mapping):
    """Bytes per float32 element on the wire, ``(push, pull)``, for each registered
    compression= of fit, by name (``"none"``: float32), as each format declares them: fp16
    halves both; MXNet's 2-bit packs 16 elements in one float32 when pushing and pulls whole
    float32. Read from the registry, so a format registered later is here too."""

    def __getitem__(self, name: str) -> Tuple[float, float]:
        if name not in cmp.REGISTRY:
            raise KeyError(name)
        wire = cmp.REGISTRY[name]
        return wire.push_bytes, wire.pull_bytes

    def __iter__(self) -> Iterator[str]:
        return iter(list(cmp.REGISTRY))

    def __len__(self) -> int:
        return len(cmp.REGISTRY)


WIRE = _Wires()


@dataclass(frozen=True)
class Layout:
    """Where each worker (by rank) and each server (by ps-lite's server rank) runs."""
    workers: Tuple[str, ...]
    servers: Tuple[str, ...]

    @property
    def kind(self) -> str:
        """``colocated`` (every server on a worker's host), ``dedicated`` (none) or
        ``mixed``."""
        shared = [s in set(self.workers) for s in self.servers]
        return "colocated" if all(shared) else "dedicated" if not any(shared) else "mixed"


def key_parts(sizes: Sequence[int], servers: int, bound: int = DEFAULT_BIGARRAY_BOUND,
              first_key: int = 0) -> List[List[Tuple[int, float]]]:
    """Each key's ``(server, elements)`` parts as MXNet 1.9.1 places keys ``first_key ..``: an
    array of at least ``bound`` elements is sliced evenly over every server, a smaller one goes
    whole to server ``(key * 9973) % servers``."""
    parts = []
    for key, size in enumerate(sizes, first_key):
        if size >= bound:
            parts.append([(s, size / servers) for s in range(servers)])
        else:
            parts.append([((key * SERVER_HASH) % servers, float(size))])
    return parts


@dataclass(frozen=True)
class Links:
    """Bytes per step on each host's link: ``up`` sent, ``down`` received, and each
    direction's largest single key part (the pipeline's fill)."""
    up: Dict[str, float]
    down: Dict[str, float]
    fill_up: Dict[str, float]
    fill_down: Dict[str, float]

    def busiest(self) -> float:
        """The busiest direction of any link: its bytes, fill included."""
        loads = [self.up[h] + self.fill_up[h] for h in self.up] + \
                [self.down[h] + self.fill_down[h] for h in self.down]
        return max(loads, default=0.0)

    def bound(self) -> float:
        """The busiest direction's bytes alone: what a perfect pipeline would need."""
        return max(list(self.up.values()) + list(self.down.values()), default=0.0)


def link_bytes(layout: Layout, sizes: Sequence[int], itemsize: float = 4,
               bound: int = DEFAULT_BIGARRAY_BOUND, push_itemsize: Optional[float] = None) -> Links:
    """Count one step's bytes on every link for ``layout`` and keys of ``sizes`` elements,
    pulled at ``itemsize`` bytes each and pushed at ``push_itemsize`` (default: the same; see
    WIRE for a compression's)."""
    push_itemsize = itemsize if push_itemsize is None else push_itemsize
    up: Dict[str, float] = defaultdict(float)
    down: Dict[str, float] = defaultdict(float)
    # bytes of each key part through each link direction, summed over the workers
    part_up: Dict[Tuple[str, int, int], float] = defaultdict(float)
    part_down: Dict[Tuple[str, int, int], float] = defaultdict(float)
    for key, parts in enumerate(key_parts(sizes, len(layout.servers), bound)):
        for server, elements in parts:
            there = layout.servers[server]
            for here in layout.workers:
                if here == there:
                    continue
                for sender, receiver, nbytes in ((here, there, elements * push_itemsize),
                                                 (there, here, elements * itemsize)):  # push, pull
                    up[sender] += nbytes
                    down[receiver] += nbytes
                    part_up[sender, key, server] += nbytes
                    part_down[receiver, key, server] += nbytes
    fill_up: Dict[str, float] = defaultdict(float)
    fill_down: Dict[str, float] = defaultdict(float)
    for (host, _, _), nbytes in part_up.items():
        fill_up[host] = max(fill_up[host], nbytes)
    for (host, _, _), nbytes in part_down.items():
        fill_down[host] = max(fill_down[host], nbytes)
    return Links(dict(up), dict(down), dict(fill_up), dict(fill_down))


def calibrate(links: Links, measured_s: float) -> float:
    """The effective link rate (bytes/s) that makes ``links`` take ``measured_s``; 0 when no
    byte crosses a link (one host)."""
    return links.busiest() / measured_s if links.busiest() > 0 else 0.0


def predict(links: Links, rate: float, one_host_s: float) -> float:
    """The step time for ``links`` at the calibrated ``rate``; on one host (rate 0, or no
    byte on any link) the calibration row's own time ``one_host_s``."""
    if rate <= 0 or links.busiest() == 0:
        return one_host_s
    return links.busiest() / rate
