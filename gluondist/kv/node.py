"""This process's part in a parameter-server job: its role, rank and worker count, its one
distributed kvstore, and the collectives (allreduce, allgather, barrier) built on it.

MXNet allows one distributed kvstore per process, kept for the life of the process, and keys
registered on it stay registered. So the kvstore, the next key a trainer gets and the keys that
allreduce has registered are state of the process, a node of the job in ps-lite's words: they
live in one :class:`Node`, ``NODE``, which the functions of :mod:`gluondist.kvstore` use.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import List, Optional, Sequence

import numpy as np

from .. import envvars
from .. import _mx
from .._mx import mx
from . import compression as cmp
from .chunks import MAX_KEY, SERVER_HASH
from .kinds import DIST_KINDS, KINDS, Mode

log = logging.getLogger(__name__)

# Keys of allreduce. Since 9973 * 2**30 wraps to 2**30 modulo 2**32, key 2**30 + m gives the
# server (2**30 + 9973 * m) % servers, non-negative while 9973 * m < 2**30, i.e. m <= 107,664.
# So a vector of n <= REDUCE_CHUNK values gets key REDUCE_BASE + n (a key's shape is fixed at
# init: one key per length), and a longer one is cut into chunks of REDUCE_CHUNK values
# (the last zero-padded) on keys REDUCE_BASE + REDUCE_CHUNK + 1 + j.
REDUCE_BASE = 1 << 30
REDUCE_CHUNK = 1 << 15
REDUCE_SAFE = REDUCE_BASE // SERVER_HASH  # the largest safe m
# Under 2-bit compression allreduce sends float32 bits (TwoBit.allreduce) on the top
# BIT_KEYS keys of that range, REDUCE_BASE + REDUCE_SAFE - j, REDUCE_CHUNK values each.
BIT_KEYS = 1024
MAX_REDUCE = (REDUCE_SAFE - REDUCE_CHUNK - BIT_KEYS) * REDUCE_CHUNK  # the longest vector

# Held while a push or pull of the distributed kvstore is issued, never while one is waited
# for. MXNet's kvstore keeps its buffers in maps it does not lock (src/kvstore/kvstore_dist.h),
# and BatchNorm's job-wide sums (gluondist.syncbn) are issued from MXNet's custom-operator
# threads while the trainer's thread issues the step's pushes. The calls that block on the
# other workers (init, a barrier) wait for MXNet's engine first instead (quiet()): held there,
# the lock would stop this worker's sums, which another worker may be waiting for.
KV_LOCK = threading.Lock()


def quiet() -> None:
    """Wait until every operation queued in MXNet's engine has run, so that no custom
    operator of this process touches the kvstore during a call that blocks on the job."""
    mx.nd.waitall()


def role() -> Optional[str]:
    """This process's ps-lite role (``'worker'``, ``'server'``, ``'scheduler'``), or None when
    it was not started as part of a parameter-server job."""
    return os.environ.get(envvars.DMLC_ROLE) or None


def is_distributed() -> bool:
    """True in a worker of a launched parameter-server job."""
    return role() == "worker"


def resolve_mode(kind: Optional[str] = "auto", num_contexts: int = 1) -> Optional[Mode]:
    """The kvstore mode ``kind`` stands for here, or None when no kvstore is needed.

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
            return Mode("device") if num_contexts > 1 else None
    if kind in DIST_KINDS and not is_distributed():
        raise RuntimeError(
            f"kvstore {kind!r} needs a parameter-server job: start the script with "
            f"`gluondist launch -n WORKERS -s SERVERS script.py`, or use kvstore='auto'")
    return Mode(kind)


def reduce_keys(n: int) -> List[int]:
    """The kvstore keys allreduce sums ``n`` values on (see REDUCE_BASE)."""
    if n <= REDUCE_CHUNK:
        return [REDUCE_BASE + n]
    if n > MAX_REDUCE:
        raise ValueError(f"allreduce of {n} values: at most {MAX_REDUCE} fit MXNet's keys")
    return [REDUCE_BASE + REDUCE_CHUNK + 1 + j for j in range(-(-n // REDUCE_CHUNK))]


class Node:
    """This process's kvstore state: its distributed kvstore (None until created), the first
    key the next trainer gets, the allreduce keys registered so far and the kvstore-wide
    compression (MXNet's 2-bit) once set."""

    def __init__(self):
        self.kv = None
        self.next_key = 0
        self.reduce_keys: set = set()
        # a kvstore-wide compression (2bit), once set: for good
        self.compression: Optional[cmp.Compression] = None
        # keys pushed as they are, whatever the compression (synchronised BatchNorm's): set
        self.plain_pushes = False
        # what the job's chunk choice was measured on (gluondist.kv.tuning): its last probe
        self.chunk_probe: Optional[dict] = None
        # the order the job's last timed exchange chose (gluondist.kv.order)
        self.send_order: Optional[dict] = None

    def compress(self, kv, compression: Optional[cmp.Compression]) -> None:
        """Give the distributed kvstore ``kv`` the kvstore-wide compression a trainer asks for
        (MXNet's 2-bit), before its keys are made (or check that it has the same: MXNet cannot
        undo it)."""
        if self.compression is None and compression is not None and compression.kvstore_wide:
            if self.plain_pushes:
                raise ValueError("MXNet's 2-bit compression would compress the sums of "
                                 "sync_batchnorm's layers too: use compression='fp16' or none")
            compression.setup(kv)
            self.compression = compression
            return
        if self.compression is not None:
            cmp.check_same(self.compression, compression)

    def create(self, kind: Optional[str] = "auto", num_contexts: int = 1):
        """Create (or, for a distributed kind, return the one kept) kvstore; None where
        ``kind='auto'`` needs none. Raises ValueError for an unknown kind and RuntimeError for
        a distributed kind outside a launched job (MXNet would wait forever for a
        scheduler)."""
        mode = resolve_mode(kind, num_contexts)
        if mode is None:
            return None
        if not mode.distributed:
            return mx.kv.create(mode)
        if self.kv is not None:
            if self.kv.type != mode:
                raise RuntimeError(
                    f"this process already has a {self.kv.type!r} kvstore and MXNet allows only "
                    f"one distributed kvstore per process; use {self.kv.type!r} again")
            return self.kv
        self.kv = mx.kv.create(mode)
        expected = os.environ.get(envvars.GLUONDIST_RANK)
        if expected is not None and int(expected) != self.kv.rank:
            log.warning("launcher rank %s got kvstore rank %d (ps-lite numbers workers by "
                        "address and port: a port taken at start, or pods on Kubernetes, can "
                        "reorder them); gluondist.kvstore.rank() follows the kvstore", expected,
                        self.kv.rank)
        return self.kv

    def num_workers(self) -> int:
        if self.kv is not None:
            return self.kv.num_workers
        if is_distributed():
            return int(os.environ.get(envvars.DMLC_NUM_WORKER, "1"))
        return 1

    def rank(self) -> int:
        """The kvstore's rank once it exists; before, the launcher's (which it arranges to be
        the same)."""
        if self.kv is not None:
            return self.kv.rank
        if is_distributed():
            return int(os.environ.get(envvars.GLUONDIST_RANK, "0"))
        return 0

    def barrier(self) -> None:
        if self.kv is not None:
            quiet()
            _mx.barrier(self.kv)

    def allreduce(self, values: Sequence[float]) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64).ravel()
        if self.kv is None:
            return values
        n = len(values)
        if self.compression is not None:  # kvstore-wide (2bit): every push goes through it
            return self.compression.allreduce(values, self.rank(), self.num_workers(),
                                              self._sum_float32, BIT_KEYS * REDUCE_CHUNK)
        keys = reduce_keys(n)
        if n <= REDUCE_CHUNK:
            return self._pushpull(keys, [values])[0]
        chunks = np.zeros(len(keys) * REDUCE_CHUNK)
        chunks[:n] = values
        return np.concatenate(self._pushpull(keys, list(chunks.reshape(len(keys), -1))))[:n]

    def _pushpull(self, keys: List[int], parts: List[np.ndarray]) -> List[np.ndarray]:
        """Sum each part on its key over the workers; every key first used is registered."""
        arrays = [mx.nd.array(p, dtype="float64") for p in parts]
        new = [(k, a) for k, a in zip(keys, arrays) if k not in self.reduce_keys]
        if new:
            quiet()
            self.kv.init([k for k, _ in new], [mx.nd.zeros_like(a) for _, a in new])
            self.reduce_keys.update(k for k, _ in new)
        outs = [mx.nd.zeros_like(a) for a in arrays]
        with KV_LOCK:
            self.kv.pushpull(keys, arrays, out=outs)
        return [o.asnumpy() for o in outs]

    def _sum_float32(self, flat: np.ndarray) -> np.ndarray:
        """The workers' sum of float32 ``flat`` (the kvstore-wide compression's allreduce), on
        the top keys of allreduce's range (BIT_KEYS), pushed then pulled (2-bit refuses
        pushpull)."""
        count = -(-flat.size // REDUCE_CHUNK)
        padded = np.zeros(count * REDUCE_CHUNK, dtype=np.float32)
        padded[:flat.size] = flat
        keys = [REDUCE_BASE + REDUCE_SAFE - j for j in range(count)]
        arrays = [mx.nd.array(p, dtype="float32") for p in padded.reshape(count, -1)]
        new = [(k, a) for k, a in zip(keys, arrays) if k not in self.reduce_keys]
        if new:
            quiet()
            self.kv.init([k for k, _ in new], [mx.nd.zeros_like(a) for _, a in new])
            self.reduce_keys.update(k for k, _ in new)
        with KV_LOCK:
            self.kv.push(keys, arrays)
            self.kv.pull(keys, out=arrays)
        return np.concatenate([a.asnumpy() for a in arrays])

    def allgather(self, values: Sequence[float]) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        workers = self.num_workers() if self.kv is not None else 1
        table = np.zeros((workers, len(values)))
        table[self.rank() if self.kv is not None else 0] = values
        return self.allreduce(table.ravel()).reshape(workers, len(values))

    def union(self, values: np.ndarray) -> np.ndarray:
        """The sorted union of every worker's non-negative integers ``values`` (row ids below
        2**53), in two allgathers: the counts, then each worker's values padded to the next
        power of two of the largest (few lengths, so few keys)."""
        values = np.asarray(values, dtype=np.int64)
        if self.kv is None or "dist" not in self.kv.type:
            return np.unique(values)
        most = int(self.allgather([len(values)]).max())
        width = 1 << max(0, most - 1).bit_length()
        padded = np.zeros(width)
        padded[:len(values)] = values + 1  # 0: no value
        table = self.allgather(padded)
        return np.unique(table[table > 0].astype(np.int64) - 1)

    def reserve_keys(self, kv, count: int, agree: bool, compression: float = 0.0,
                     fuse_bytes: int = 0, batchnorm: bool = False) -> int:
        """Keys ``offset .. offset+count-1`` for a new trainer (or, ``batchnorm``, for
        sync_batchnorm's layers) on the distributed kvstore ``kv``; with ``agree``, every
        worker must reserve the same keys for the same ``compression`` (a number per setting,
        see Compression.code) and fuse small gradients up to the same ``fuse_bytes`` (the same
        keys, else pushes of other sizes): checked."""
        offset = self.next_key
        self.next_key += count
        if self.next_key > MAX_KEY:
            raise RuntimeError(f"this process's trainers need {self.next_key} kvstore keys (one "
                               "per parameter, or per chunk of a big one), more than MXNet's "
                               f"kvstore can key ({MAX_KEY}); send bigger chunks "
                               "(GLUONDIST_CHUNK_BYTES), or train in a new process when earlier "
                               "trainers hold the keys")
        if agree:  # a worker whose trainers differ would push to keys nobody else pulls: hang
            rows = self.allgather([offset, count, compression, fuse_bytes, batchnorm])
            if (rows != rows[0]).any():
                self.next_key = int((rows[:, 0] + rows[:, 1]).max())  # the same everywhere
                what = "made different calls (some sync_batchnorm, others a trainer: " \
                    "make_trainer or fit)" if (rows[:, 4] != rows[0, 4]).any() \
                    else "gave different compression=" if (rows[:, 2] != rows[0, 2]).any() \
                    else "fuse small gradients up to different sizes (GLUONDIST_FUSE_BYTES, " \
                    "chunk_bytes)" if (rows[:, 3] != rows[0, 3]).any() \
                    else "made different sequences of trainers (fit calls)"
                raise RuntimeError(f"workers {what}; every worker of a job must run the same "
                                   "training calls in order, with the same settings")
        return offset

NODE = Node()  # this process's
