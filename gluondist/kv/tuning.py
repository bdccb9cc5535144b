"""The chunk size a dist_sync job chooses for itself by measuring its own links: what
:func:`~gluondist.kvstore.make_trainer` uses when neither its ``chunk_bytes`` nor
``GLUONDIST_CHUNK_BYTES`` gives one.

No size suits every network. On one host, and on links fast enough that no queue fills,
512 KiB costs the fewest messages; 64 KiB took 2.0 to 2.8 times as long there. On 200 Mbit/s
links whose queues hold about 1.5 MB, 512 KiB chunks in flight overfilled them (packets
dropped and resent) and 64 KiB was faster by 13-17% (see chunks.py). So the first trainer of
a process that has a gradient to cut measures: a probe array of up to :data:`PROBE_BYTES`
summed over the job through a trainer of each of :data:`CANDIDATES`, as the exchange sends a
gradient, :data:`ROUNDS` times each in alternating order after one unmeasured pass (where a
sum is quick, each time several sums back to back, see :data:`MEASURE_S`). Each
measurement is the slowest worker's, and every worker gets the same table (an allgather), so
every worker picks the same size: the largest within :data:`WITHIN` of the fastest, as larger
chunks cost the workers and servers less. MXNet cannot delete keys: the probe's stay on the
servers (its bytes once per candidate). Later trainers of the process reuse the choice, unless
they would cut more than the probe held: a choice measured on a small model's few chunks is
noise for a bigger one, which measures again.
"""
from __future__ import annotations

import logging
import time
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import _mx
from .._mx import mx
from .chunks import CHUNK_BYTES
from .kinds import Mode
from .node import NODE

log = logging.getLogger(__name__)

CANDIDATES = (1 << 19, 1 << 18, 1 << 17, 1 << 16)  # 512, 256, 128 and 64 KiB
PROBE_BYTES = 8 << 20  # at least a few chunks in flight to every server at 512 KiB
ROUNDS = 2
# Within 2%: on 200 Mbit/s links (3 workers, a server beside each) the probe put 128, 256
# and 64 KiB within 3% of each other while 256 KiB trained 5% slower than 128 KiB; on one
# host 256 KiB takes 1.36 times as long as 512 KiB, far outside it.
WITHIN = 1.02
# A measurement is several sums back to back where one sum is quick, its time per sum: one
# quick sum is noisy, and its ramp (its first chunk waits for a push, its last for a pull),
# which a training step's many layers fill, weighs most on large chunks. On 1 Gbit/s links (a
# server beside each worker) one sum of 8 MiB took about 95 ms at 3 workers, 128 to 512 KiB
# came within 2.5 to 6% of each other (512 KiB never the fastest), and single sums chose 128
# KiB in 6 of 19 jobs of ResNet-18 v1 (benchmarks/results/peers_resnet18_1gbit.json,
# ..._1gbit_probe.json), whose epochs were 8 to 14% longer than the 512 KiB jobs' at 2 and 3
# workers; with several sums a measurement, in 1 of 15 (peers_resnet18_1gbit_sums.json). So a
# measurement is as many sums as take about MEASURE_S by the unmeasured pass (each size's
# slowest worker, averaged over the sizes), up to MOST_SUMS: one where a sum takes about 0.27
# s or more, as an 8 MiB probe does on 200 Mbit/s links from 3 workers.
MEASURE_S = 0.4
MOST_SUMS = 4


def probe_bytes(params: Sequence) -> int:
    """The probe's float32 bytes for ``params``: what of their dense gradients the smallest
    candidate would cut, up to PROBE_BYTES (0: nothing would be cut, nothing to choose)."""
    cut = 0
    for p in params:
        if p.grad_req == "null" or _mx.storage(p) != ("default", "default"):
            continue
        nbytes = int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize
        if nbytes > CANDIDATES[-1]:
            cut += nbytes
    return min(cut, PROBE_BYTES)


def chunk_bytes(kv, params: Sequence, compression, make) -> int:
    """The chunk size of a trainer of ``params`` on ``kv`` given none. In a synchronous job on
    the kvstore gluondist made (:func:`gluondist.kvstore.create`, which fit and make_trainer
    use): measured now when ``params`` have a gradient to cut (every worker calls this with
    the same parameters), unless a choice of this process was measured with at least as many
    bytes as they would cut, which is reused. ``make(params, chunk_bytes=c)`` makes an SGD
    trainer of the probe's parameter with chunks of ``c``. Otherwise CHUNK_BYTES: outside a
    job, under dist_async, under MXNet's kvstore-wide 2-bit compression (set, or to be set by
    ``compression``), which the probe's float32 trainers would not match, and on a kvstore made
    by ``mx.kv.create`` (gluondist's sums, which make every worker choose alike, run on its
    own)."""
    mode = Mode.of(kv)
    wide = NODE.compression is not None or (compression is not None and compression.kvstore_wide)
    if mode is None or not mode.distributed or mode.updates_on_servers or wide or \
            kv is not NODE.kv:
        return CHUNK_BYTES
    nbytes = probe_bytes(params)
    if nbytes == 0:
        return CHUNK_BYTES
    if NODE.chunk_probe is not None and NODE.chunk_probe["bytes"] >= nbytes:
        return chosen()
    seconds, sums = measure(nbytes, make)
    NODE.chunk_probe = {"bytes": nbytes, "seconds": dict(zip(CANDIDATES, seconds)),
                        "sums": sums}
    size = chosen()
    rows = ", ".join(f"{c >> 10} KiB {s * 1e3:.1f} ms" for c, s in zip(CANDIDATES, seconds))
    said = log.info if size != CHUNK_BYTES and NODE.rank() == 0 else log.debug
    said("gluondist: chunks of %d KiB, chosen by measuring this job's links (a probe of %.1f "
         "MB: %s); GLUONDIST_CHUNK_BYTES overrides", size >> 10, nbytes / 1e6, rows)
    return size


def measure(nbytes: int, make) -> Tuple[List[float], int]:
    """Each candidate's time for one sum of ``nbytes`` over the job: the best of ROUNDS, each
    the slowest worker's mean over the sums of a measurement, and how many those were (see
    :func:`sums_per_measurement`)."""
    trainers = []
    for c in CANDIDATES:
        param = mx.gluon.Parameter(f"gluondist_probe_{c}", shape=(nbytes // 4,))
        param.initialize(mx.init.Zero(), ctx=mx.cpu())
        trainers.append(make([param], chunk_bytes=c))
        trainers[-1].exchange.order.measured = False  # its sums only, no step timed
        param.grad()[:] = 1
    table, sums = np.zeros((ROUNDS + 1, len(CANDIDATES))), 1
    for r in range(ROUNDS + 1):  # the first pass is not counted
        order = range(len(CANDIDATES)) if r % 2 else reversed(range(len(CANDIDATES)))
        for i in order:
            start = time.perf_counter()
            for _ in range(sums):
                trainers[i].allreduce_grads()
            mx.nd.waitall()
            table[r, i] = (time.perf_counter() - start) / sums
        if r == 0:  # the same count on every worker: from the slowest's first pass
            sums = sums_per_measurement(float(NODE.allgather(table[0]).max(axis=0).mean()))
    slowest = NODE.allgather(table[1:].ravel()).max(axis=0).reshape(ROUNDS, len(CANDIDATES))
    return [float(s) for s in slowest.min(axis=0)], sums


def sums_per_measurement(seconds: float) -> int:
    """Sums back to back in one measurement, where one sum took ``seconds``: about MEASURE_S
    of them, from 1 to MOST_SUMS."""
    return max(1, min(MOST_SUMS, round(MEASURE_S / seconds))) if seconds > 0 else MOST_SUMS


def choose(seconds: Sequence[float], candidates: Sequence[int] = CANDIDATES,
           within: float = WITHIN) -> int:
    """The largest of ``candidates`` (largest first) whose time is within ``within`` of the
    fastest."""
    best = min(seconds)
    return next(c for c, s in zip(candidates, seconds) if s <= best * within)


def chosen() -> Optional[int]:
    """The chunk size this process's job chose last, from :func:`probed`'s table (None: not
    measured yet)."""
    probe = NODE.chunk_probe
    return None if probe is None else choose(list(probe["seconds"].values()),
                                             list(probe["seconds"]))


def probed() -> Optional[dict]:
    """What the choice rests on: the probe's ``bytes``, each candidate's ``seconds`` for one
    sum (a dict by chunk size) and the ``sums`` back to back each measurement took (None before
    any probe)."""
    return NODE.chunk_probe
