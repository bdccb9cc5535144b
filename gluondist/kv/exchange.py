"""One trainer's exchange (:class:`Exchange`): the one object that moves a step's gradients and
applies its update. fit's step, a hand-written loop's ``trainer.step`` and a pipeline's all come
here, and it goes down to the wire: MXNet keys of the trainer's own, big gradients cut in chunks
that travel through staging arrays, the wire format (compression), and the optimizer's update
(:class:`~gluondist.kv.updates.Updates`), piece by piece as the chunks land."""
from __future__ import annotations

from collections import deque
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import _mx
from .._mx import mx
from ..trees import Kept
from . import compression as cmp
from .fusion import Bucket, buckets
from .node import KV_LOCK, NODE, quiet
from .order import Order
from .staging import Staging
from .updates import Updates

Bounds = List[Tuple[int, int]]  # a parameter's chunks: element ranges


class Exchange:
    """The step of the trainer of ``params``: their gradients summed over this process's devices
    and the job's workers through ``kv`` (None: one device, nothing to sum), and the update
    applied by ``updates``, here or (``servers_update``, dist_async) on the servers.

    MXNet keeps one distributed kvstore per process, so the keys of this trainer start at
    ``offset``; a parameter of several ``chunks`` (element ranges) gets one key per chunk and
    travels as views of those ranges through ``staging`` arrays, so the pull of one chunk
    overlaps the push of the next, sent by ``wire`` (see :mod:`gluondist.kv.compression`).
    Small whole gradients travel fused, up to ``fuse_bytes`` on one key spread over the
    ``servers`` (see :mod:`gluondist.kv.fusion`; 0: each on its own), with MXNet's own wire
    (no compression) and the updates here. The gradients go in the order of
    :mod:`gluondist.kv.order`: the first ``backward_share`` of the chunked bytes in backward's
    order, the rest in forward order (None: the share measured in a job)."""

    def __init__(self, params: Sequence, updates: Updates, kv=None,
                 servers_update: bool = False, offset: int = 0,
                 chunks: Optional[Sequence[Bounds]] = None, staging: Optional[Staging] = None,
                 wire: Optional[cmp.Compression] = None, fuse_bytes: int = 0,
                 servers: int = 1, backward_share: Optional[float] = None):
        self.params, self.updates, self.kv = list(params), updates, kv
        self.servers_update = servers_update
        self.chunks = [list(c) for c in chunks] if chunks is not None else \
            [[(0, 0)] for _ in self.params]  # whole: the size plays no part
        count = sum(map(len, self.chunks))
        self.first = [int(k) for k in offset + np.cumsum([0] + [len(c) for c in self.chunks])][:-1]
        self._keys = [list(range(f, f + len(c))) for f, c in zip(self.first, self.chunks)]
        self.wire = wire or cmp.FLOAT32.bind(kv.num_workers if kv is not None else 1, count)
        self.staging = staging or Staging(0, 0)
        self.early = False  # whether chunks are updated as they land (make_trainer: plan)
        self._joined = kv is None
        # the step's pushpulls, prepared (see _mx.PushPull), on MXNet's own kvstores
        self._prepared = isinstance(kv, mx.kv.KVStore)
        self._kept = Kept()
        fuse = fuse_bytes > 0 and kv is not None and not servers_update and \
            type(self.wire) is cmp.Compression  # float32: MXNet's own wire
        eligible = [_mx.storage(p) == ("default", "default") for p in self.params]  # dense
        self.buckets: List[Bucket] = buckets(self.params, self.chunks, self.first, fuse_bytes,
                                             eligible, servers) if fuse else []
        self._bucket_of = {m: b for b in self.buckets for m in b.members}
        # row-sparse gradients of dense weights: their touched rows (see _rows)
        self._sparse = {i for i, p in enumerate(self.params)
                        if _mx.storage(p) == ("default", "row_sparse")}
        self.stand_in = False  # this step's batch is a stand-in (TrainStep.loss_scale)
        # the order the gradients go in: its head's share given, or chosen at steps timed
        # (see order.py)
        self.order = Order([sum(b - a for a, b in c) * np.dtype(p.dtype).itemsize
                            if len(c) > 1 else 0 for c, p in zip(self.chunks, self.params)],
                           self.distributed and not servers_update and kv is NODE.kv,
                           backward_share)

    @property
    def distributed(self) -> bool:
        return self.kv is not None and "dist" in self.kv.type

    def plan(self, update_bytes: Optional[int] = None) -> None:
        """Update chunked gradients piece by piece as they land, where that gives the result of
        one update after the last pull (see Updates.plan; never under servers_update)."""
        self.early = not self.servers_update and self.wire.final_on_landing and \
            self.updates.plan(self.first, self.chunks, update_bytes)

    # set-up

    def join(self, barrier: bool = True) -> None:
        """The first pull: every device (and, in a job, every worker) gets this process's first
        device's (worker 0's) parameters, and the wire its keys; in a job the workers then wait
        for each other, so no first pull races a gradient push."""
        if self.kv is None:
            return
        quiet()  # broadcast inits its keys, a barrier: see KV_LOCK
        for i, param in enumerate(self.params):
            if i not in self._bucket_of:
                keys, views = self._keyed(i, param.list_data())  # the first device's is sent
                self.kv.broadcast(keys, [v[0] for v in views], out=views)
        for bucket in self.buckets:  # the members' values in one flat array, and back
            bucket.make(self.params)
            for m in bucket.members:
                self.params[m].list_data()[0].copyto(bucket.views[m][0])
            self.kv.broadcast(bucket.key, bucket.flats[0], out=bucket.flats)
            for m in bucket.members:
                for view, data in zip(bucket.views[m], self.params[m].list_data()):
                    view.copyto(data)
        if self.wire.key_factor > 1:
            self.wire.start(self.kv, self.wire_keys(),
                            [b - a for c in self.chunks for a, b in c])
        self._joined = True
        if barrier and self.distributed:
            mx.nd.waitall()
            _mx.barrier(self.kv)

    def wire_keys(self) -> List[int]:
        """The wire's own keys (key_factor 2, fp16's float16 ones), in the order of the
        chunks."""
        start = self.first[0] if self.first else 0
        return [self.wire.key(start + j) for j in range(self.wire.count)]

    def keys(self, index: int) -> List[int]:
        """Parameter ``index``'s MXNet keys, one per chunk."""
        return self._keys[index]

    def _keyed(self, index: int, arrays: list) -> Tuple[List[int], List[list]]:
        """Parameter ``index``'s MXNet keys, and for each the views of ``arrays`` (one per
        device) it travels in: the arrays themselves when it is whole."""
        bounds = self.chunks[index]
        if len(bounds) == 1:
            return self.keys(index), [arrays]
        views = self._kept.get(("cut", index), arrays, lambda: [
            [a.reshape((-1,))[lo:hi] for a in arrays] for lo, hi in bounds])
        return self.keys(index), views

    # the step

    def rescale(self, scale: float) -> None:
        """The step's gradient scale (MXNet's ``rescale_grad``), fixed on the servers
        (dist_async) when they got the optimizer."""
        opt = self.updates.optimizer
        if self.servers_update and self.distributed and opt.rescale_grad != scale:
            raise UserWarning("Possible change in the `batch_size` from previous `step` "
                              "detected: under dist_async the servers fixed the gradient scale "
                              "when they got the optimizer; step with the batch_size given to "
                              "make_trainer")
        opt.rescale_grad = scale

    def reduce(self, early: bool = False, check: bool = False) -> None:
        """Sum every trained gradient over the devices and workers, in place (dist_async:
        push it, and pull the weights the servers updated). With ``early`` (after
        :meth:`rescale`) chunked gradients are updated as their pieces land; with ``check`` the
        wire's check runs after the pulls (fp16's overflow), else at the next step's first
        push."""
        if self.kv is None:
            return
        if not self._joined:  # a one-process trainer made before its shapes were known
            self.join()
        trained = [(i, p) for i, p in enumerate(self.params) if p.grad_req != "null"]
        if self.servers_update:
            for i, p in trained:
                with KV_LOCK:
                    self.kv.pushpull(self.first[i], p.list_grad(), out=p.list_data(),
                                     priority=-i)
            return
        timed = self.order.timing(trained)
        landing = early and self.early and self.updates.begin()
        self.wire.begin([k for i, _ in trained for k in self.keys(i)])
        sent = set()
        # issued first in the order backward makes the gradients (the reverse of the
        # parameters'), each pushed once made while backward goes on, then in forward order
        # (see order.py): MXNet's CPU engine runs operations in the order they become ready,
        # and the chunks take the staging slots in this order
        for i, p in self.order.of(trained):
            bucket = self._bucket_of.get(i)
            if i in self._sparse:
                continue
            if bucket is None:
                self._pushpull(i, p.list_grad(), landing)
            elif bucket.key not in sent:
                sent.add(bucket.key)
                self._fused(bucket)
        for i, p in trained:
            if i in self._sparse:
                self._rows(p.list_grad())
        if timed:  # before the wire's check, which may raise
            self.order.timed(trained)
        if check:
            self.wire.check()

    def _rows(self, grads: list) -> None:
        """A row-sparse gradient summed over the devices and workers, in place: the rows any
        of them touched (their union), each the sum of its rows, through allreduce (float64)
        as one array of those rows. MXNet's own route, row-sparse pushes to the servers,
        aborts a server that does not run the optimizer (update_on_kvstore=False). A
        stand-in batch (a worker's empty share) adds no rows, as one process has none."""
        parts = [] if self.stand_in else [(g.indices.asnumpy(), g.data.asnumpy())
                                          for g in grads]
        rows = NODE.union(np.unique(np.concatenate([ids for ids, _ in parts] + [[]])))
        if not len(rows):  # no worker's batch touched it: nothing to sum or update
            return
        table = np.zeros((len(rows),) + tuple(grads[0].shape[1:]))
        for ids, data in parts:  # a device's rows are distinct
            table[np.searchsorted(rows, ids)] += data
        table = NODE.allreduce(table.ravel()).reshape(table.shape)
        for grad in grads:
            mx.nd.sparse.row_sparse_array((table, rows), shape=grad.shape, ctx=grad.context,
                                          dtype=grad.dtype).copyto(grad)

    def update(self, ignore_stale: bool = False) -> None:
        """After :meth:`reduce`: update what is not yet (dist_async: the servers did; the
        gradients are marked used)."""
        self.updates.update(ignore_stale, apply=not self.servers_update)

    def _pushpull(self, index: int, grads: list, landing: bool) -> None:
        """One parameter's pushpull, its chunks through staging arrays (a memory copy each way);
        sent whole as it is unless the wire stages every gradient (fp16 casts it). Issued in
        this order (every call returns at once; MXNet's engine runs each operation after the
        earlier ones on its arrays): chunk i + slots is staged after chunk i was landed, and so
        waits for its slot; chunk i + 1 before, as landing in the gradient makes every later
        use of it wait."""
        keys, views = self._keyed(index, grads)
        chunked, wire, waiting = len(keys) > 1, self.wire, deque()
        for key, parts in zip(keys, views):
            if not chunked and wire.whole_as_is:
                self._send(key, parts, parts, -index, key)
                continue
            if chunked and len(waiting) == self.staging.slots > 0:
                self._land(*waiting.popleft(), landing)
            bufs = wire.stage(key, parts, self.staging, chunked)
            self._send(wire.key(key), bufs, bufs, -index, (key, id(bufs[0])))
            if chunked:
                waiting.append((key, bufs, parts))
            else:
                wire.land(bufs, parts)
        for key, bufs, parts in waiting:
            self._land(key, bufs, parts, landing)

    def _fused(self, bucket: Bucket) -> None:
        """One bucket's pushpull: its members' gradients copied into their ranges of its flat
        arrays, the flat arrays' sums copied back (a member not trained now is left out)."""
        params = [(m, self.params[m]) for m in bucket.members]
        moved = [p.name for _, p in params if p.list_ctx() != bucket.contexts
                 or np.dtype(p.dtype) != bucket.dtype]
        if moved:
            raise ValueError(f"parameters {', '.join(moved[:3])} moved to other devices or "
                             "another dtype after make_trainer; make a new trainer for them")
        grads = [(m, p.list_grad()) for m, p in params if p.grad_req != "null"]
        for m, arrays in grads:
            for d, (grad, view) in enumerate(zip(arrays, bucket.views[m])):
                self.wire.copy(("fuse-in", m, d), grad, view)
        self._send(bucket.key, bucket.flats, bucket.flats, -bucket.members[0],
                   ("fused", bucket.key))
        for m, arrays in grads:
            for d, (grad, view) in enumerate(zip(arrays, bucket.views[m])):
                self.wire.copy(("fuse-out", m, d), view, grad)

    def _land(self, key: int, bufs, out, landing: bool) -> None:
        """Chunk ``key``'s sum, from its staging arrays ``bufs`` into the gradient ``out``."""
        self.wire.land(bufs, out)
        if landing:
            self.updates.landed(key)

    def _send(self, key: int, values: list, out: list, priority: int, name) -> None:
        """One MXNet key's pushpull of ``values`` (one array per device) into ``out``, its C
        call prepared once under ``name`` where it pulls into what it pushes."""
        with KV_LOCK:
            self._issue(key, values, out, priority, name)

    def _issue(self, key: int, values: list, out: list, priority: int, name) -> None:
        if self.wire.kvstore_wide:  # MXNet's 2-bit refuses pushpull
            self.kv.push(key, values, priority=priority)
            self.kv.pull(key, out=out, priority=priority)
        elif out is values and self._prepared:
            self._kept.get(("pushpull", name), values,
                           lambda: _mx.PushPull(self.kv, key, values))(priority)
        else:
            self.kv.pushpull(key, values, out=out, priority=priority)
