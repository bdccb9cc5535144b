"""The trainer of the parameter-server mode: a ``gluon.Trainer`` whose kvstore semantics are
right (:func:`make_trainer`), big gradients cut into chunks that pipeline, and the optimizer
step of one batch for each mode (:class:`TrainStep`). See :mod:`gluondist.kvstore` for what the
copied recipes get wrong."""
from __future__ import annotations

import os
from collections import deque
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import devices, envvars as ev
from .._mx import mx
from . import compression as cmp
from .calls import Prepared
from .chunks import (chunk_bounds, chunk_bytes_from_env, chunk_updates_from_env,
                     chunks_in_flight_from_env)
from .kinds import Mode
from .node import NODE
from .safepickle import check_sendable
from .staging import Staging
from .updates import ChunkUpdates


def make_trainer(params, optimizer="sgd", optimizer_params=None, kvstore="auto",
                 num_contexts: int = 1, batch_size: Optional[int] = None,
                 chunk_bytes: Optional[int] = None, trainer_type=None, compression=None):
    """A ``gluon.Trainer`` whose kvstore semantics are right, ready for the first step.

    ``kvstore`` is a kind (see :func:`create`) or a KVStore. Sync modes update on the workers
    (``update_on_kvstore=False``); ``dist_async`` on the servers. With a distributed kvstore the
    parameters must already be initialised with known shapes (run one forward pass first): they
    are broadcast from worker 0 and every worker waits at a barrier before this returns, so the
    first pull cannot race a gradient push. Call ``step()`` with the *global* batch size.

    ``dist_async`` applies each worker's gradient alone, with a scale fixed when the optimizer
    is sent to the servers (here): give ``batch_size``, the local size every ``step()`` uses.

    Any number of trainers may be made in one process, one after another (a second ``fit``, a
    new model): each gets kvstore keys after the previous one's, so a distributed kvstore (which
    MXNet keeps for the life of the process) never sees a key registered twice. Every worker
    must make the same sequence of trainers; in ``dist_sync`` this is checked.

    In sync modes each gradient of more than ``chunk_bytes`` (default :data:`CHUNK_BYTES`, or
    ``GLUONDIST_CHUNK_BYTES``; 0 sends every one whole) is pushed and pulled in chunks of
    about that size, on keys of their own, so the pull of one chunk overlaps the push of the
    next: one big array then takes about as long as the same bytes in many small ones. At most
    :data:`CHUNKS_IN_FLIGHT` chunks per server (or ``GLUONDIST_CHUNKS_IN_FLIGHT``) are pushed
    and not yet pulled back. The result is bit-equal to sending each gradient whole.
    :class:`TrainStep` updates each chunk as its sum comes back (see
    :mod:`gluondist.kv.updates`; ``GLUONDIST_CHUNK_UPDATES=0``: after the last pull).

    ``params``: a ParameterDict, a list of Parameters, or a
    :class:`~gluondist.pipeline.Pipeline` (whose ``trainer_type``, a
    :class:`~gluondist.pipeline.StageTrainer`, then spans every stage). ``trainer_type``: a
    subclass of ``gluon.Trainer`` to make; default the pipeline's, else ``gluon.Trainer``.

    ``compression`` (dist_sync): None, a registered wire format's name (``"fp16"``, ``"2bit"``)
    or its dict form (``{"type": "2bit", "threshold": t}``; see
    :mod:`gluondist.kv.compression`); chunks are compressed alone."""
    compression = cmp.parse(compression)
    params, trainer_type = _parameters(params, trainer_type)
    chunk_bytes, in_flight = _chunking(chunk_bytes)
    kv = NODE.create(kvstore, num_contexts) if isinstance(kvstore, str) or kvstore is None \
        else kvstore
    mode = Mode.of(kv)
    dist = mode is not None and mode.distributed
    cmp.check_mode(compression, mode)
    update_on_kvstore = None if kv is None else mode.updates_on_servers
    # after the caller's inference passes: the kvstore cannot send a weight they left in
    # oneDNN's layout, and a training forward would reorder it behind the first update
    devices.settle(params)
    if dist:
        kv = _keyed(kv, params, update_on_kvstore, chunk_bytes, in_flight, compression)
    if isinstance(optimizer, mx.optimizer.Optimizer) and optimizer_params:
        raise ValueError("give optimizer_params only with an optimizer name: an "
                         "mx.optimizer.Optimizer instance carries its own settings")
    trainer = (trainer_type or mx.gluon.Trainer)(params, optimizer, optimizer_params, kvstore=kv,
                               update_on_kvstore=update_on_kvstore)
    if dist:
        _join(trainer, kv, update_on_kvstore, batch_size)
    elif kv is not None:
        _init_devices(trainer)
    return trainer


def _init_devices(trainer) -> None:
    """A trainer over this process's devices: device 0's values on every device now, not in
    the first step. MXNet would do this inside the first step, after that batch's forward:
    copying device 0's BatchNorm statistics over the others then, so a run resumed mid-epoch
    would differ from one that was not (the copy falls on another batch)."""
    if not any(p._deferred_init for p in trainer._params):
        trainer._init_kvstore()
        trainer._init_params()


def _parameters(params, trainer_type) -> Tuple[list, Optional[type]]:
    """``params`` as a list, and the trainer type (a Pipeline's own, unless given)."""
    if hasattr(params, "trainer_type"):  # a Pipeline: its parameters, its trainer
        trainer_type = trainer_type or params.trainer_type
        params = params.collect_params()
    # A list, in the net's own order: given a dict, Trainer sorts it by the parameters' global
    # names (dense9_ after dense10_), so the indices that optimizer states are kept under
    # would depend on how many layers the process had made before.
    return (list(params.values()) if hasattr(params, "values") else list(params)), trainer_type


# What MXNet's parameter servers can hold and sum: an array of another dtype aborts the server at
# its first push ("This operation only support floating point types"), even one that no
# gradient trains (the initial broadcast pushes every parameter)
SUMMABLE = ("float16", "float32", "float64")


def _check_sendable(params) -> None:
    """Refuse, in one line, a parameter that a job's kvstore would fail on."""
    for p in params:
        if p._stype != "default" or p._grad_stype != "default":
            kind = p._grad_stype if p._grad_stype != "default" else p._stype
            raise ValueError(
                f"parameter {p.name} is {kind} (Embedding(..., sparse_grad=True) gives row_sparse "
                "gradients), which gluondist's jobs cannot exchange yet: make it dense "
                "(sparse_grad=False)")
        dtype = np.dtype(p.dtype).name
        if dtype not in SUMMABLE:
            raise ValueError(
                f"parameter {p.name} is {dtype}, and a job's servers hold only "
                f"{', '.join(SUMMABLE)} arrays: cast it (net.cast('float32')) or leave it out "
                "of the trainer's parameters")


def _chunking(chunk_bytes: Optional[int]) -> Tuple[int, int]:
    """``chunk_bytes`` (None: GLUONDIST_CHUNK_BYTES's) and the chunks in flight per server, from
    the environment, whose chunk settings are refused here in one line in any process (with or
    without a kvstore), GLUONDIST_CHUNK_UPDATES too (TrainStep reads it)."""
    if chunk_bytes is None:
        chunk_bytes = chunk_bytes_from_env()
    in_flight = chunks_in_flight_from_env()
    chunk_updates_from_env()
    return chunk_bytes, in_flight


def _keyed(kv, params, update_on_kvstore: bool, chunk_bytes: int, in_flight: int,
           compression: Optional[cmp.Compression]) -> "_KeyedStore":
    """The trainer's view of the job's distributed kvstore: keys of its own, in chunks."""
    _check_sendable(params)
    # dist_async's servers run the optimizer, which needs each parameter whole (its state,
    # lr_mult by name, LARS' and LAMB's norms): only updates on the workers are chunked
    chunks = [parameter_chunks(p, 0 if update_on_kvstore else chunk_bytes) for p in params]
    count = sum(map(len, chunks))
    wire = (compression or cmp.FLOAT32).bind(kv.num_workers, count)
    wire.check_params(params)
    # key_factor 2 (fp16): the wire's keys after the float32 ones that broadcast the parameters
    offset = NODE.reserve_keys(kv, count * wire.key_factor, not update_on_kvstore,
                               compression.code if compression is not None else 0.0)
    NODE.compress(kv, compression)  # kvstore-wide (2bit): before this trainer's keys are made
    # the staging slots: CHUNKS_IN_FLIGHT per server (consecutive chunks go to different
    # servers), as big as the largest chunk of a gradient cut in several
    servers = int(os.environ.get(ev.DMLC_NUM_SERVER, "1"))
    staging = Staging(in_flight * servers,
                      max((b - a for c in chunks if len(c) > 1 for a, b in c), default=0))
    return _KeyedStore(kv, offset, chunks, staging, wire)


def _join(trainer, kv, update_on_kvstore: bool, batch_size: Optional[int]) -> None:
    """A distributed trainer's first pull, before any step: worker 0's parameters everywhere,
    (dist_async) the optimizer on the servers, every worker past a barrier."""
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
        check_sendable(trainer._optimizer)  # what the servers will load, refused here first
    # Trainer would do this lazily inside the first step(), after the forward pass; doing
    # it now and waiting closes the init-pull / gradient-push race (see make_trainer).
    trainer._init_kvstore()
    trainer._init_params()
    if kv.wire.key_factor > 1:
        kv.wire.start(kv._kv, kv.wire_keys(), [b - a for c in kv._chunks for a, b in c])
    mx.nd.waitall()
    kv._barrier()


def parameter_chunks(param, chunk_bytes: int) -> List[Tuple[int, int]]:
    """A parameter's chunks (see chunk_bounds); sparse ones travel whole."""
    size = int(np.prod(param.shape))
    if param._stype != "default" or param._grad_stype != "default":
        return [(0, size)]
    return chunk_bounds(size, np.dtype(param.dtype).itemsize, chunk_bytes)


class _KeyedStore(mx.kv.KVStoreBase):
    """The process's distributed kvstore as one trainer sees it.

    ``gluon.Trainer`` always numbers its parameters from 0, and a second trainer on MXNet's one
    distributed kvstore would register those keys again and hang in the init broadcast: the
    keys of this trainer start at ``offset``. A parameter with several ``chunks`` (element
    ranges) gets one key per chunk, and its arrays travel as views of those ranges."""

    def __init__(self, kv, offset: int, chunks: Sequence[Sequence[Tuple[int, int]]],
                 staging: Optional["Staging"] = None, wire: Optional[cmp.Compression] = None):
        self._kv, self._chunks = kv, [list(c) for c in chunks]
        self._count = sum(len(c) for c in chunks)
        self.wire = wire or cmp.FLOAT32.bind(kv.num_workers, self._count)  # how keys travel
        self._first = list(offset + np.cumsum([0] + [len(c) for c in chunks[:-1]]))
        self.staging = staging or Staging(0, 0)
        # the step's pushpulls, prepared (see _pushpull) on MXNet's own kvstores
        self._calls = Prepared() if isinstance(kv, mx.kv.KVStore) else None
        # MXNet keys of the chunks of a gradient cut in several (see pushpull)
        self._staged = {int(f) + j for f, c in zip(self._first, self._chunks) if len(c) > 1
                        for j in range(len(c))}
        self._cuts: dict = {}  # trainer key -> (the arrays last cut, their chunks' views)
        # called with each chunk's MXNet key once its sum is copied into the gradient (see
        # gluondist.kv.updates), or None
        self.landed = None

    def _split(self, key, value=None):
        """MXNet's keys and values for trainer key(s) ``key`` and their value(s): a chunked
        key becomes its chunks' keys and views (a list of arrays, one per device, becomes a
        list of views per chunk)."""
        many = isinstance(key, (list, tuple))
        keys, values = (key, value) if many else ([key], [value])
        if value is None:
            values = [None] * len(keys)
        out_keys, out_values = [], []
        for k, v in zip(keys, values):
            bounds, first = self._chunks[k], int(self._first[k])
            if len(bounds) == 1:
                out_keys.append(first)
                out_values.append(v)
                continue
            out_keys += range(first, first + len(bounds))
            out_values += [None] * len(bounds) if v is None else self._cut(k, v, bounds)
        if not many and len(out_keys) == 1:
            return out_keys[0], out_values[0]
        return out_keys, (None if value is None else out_values)

    def _cut(self, key: int, value, bounds) -> list:
        """The chunks' views of ``value`` (an array, or a list of one per device), kept for
        the arrays last cut under ``key``: Trainer passes the same gradients every step, and
        slicing costs more than the copy."""
        arrays = list(value) if isinstance(value, (list, tuple)) else [value]
        kept = self._cuts.get(key)
        if kept is None or len(kept[0]) != len(arrays) or \
                any(a is not b for a, b in zip(kept[0], arrays)):
            flat = [a.reshape((-1,)) for a in arrays]
            views = [[f[a:b] for f in flat] for a, b in bounds]
            kept = self._cuts[key] = (arrays, [v if isinstance(value, (list, tuple)) else v[0]
                                               for v in views])
        return kept[1]

    def init(self, key, value):
        return self._kv.init(*self._split(key, value))

    def broadcast(self, key, value, out, priority=0):
        keys, values = self._split(key, value)
        return self._kv.broadcast(keys, values, self._split(key, out)[1], priority=priority)

    def push(self, key, value, priority=0):
        return self._kv.push(*self._split(key, value), priority=priority)

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        keys, outs = self._split(key, out)
        return self._kv.pull(keys, out=outs, priority=priority, ignore_sparse=ignore_sparse)

    def pushpull(self, key, value, out=None, priority=0):
        """What ``Trainer`` calls every step: chunks travel through staging arrays (see
        Staging; a memory copy each way), a gradient sent whole as it is unless the wire
        stages every one (fp16: cast into an array of its own)."""
        keys, values = self._split(key, value)
        outs = values if out is None else self._split(key, out)[1]
        many = isinstance(keys, list)
        keys, values, outs = (keys, values, outs) if many else ([keys], [values], [outs])
        wire = self.wire
        wire.begin(keys)
        # Issued in this order (every call returns at once; MXNet's engine runs each operation
        # after the earlier ones on its arrays): chunk i + slots is staged after chunk i was
        # landed, and so waits for its slot; chunk i + 1 before, as landing in the gradient
        # makes every later use of it wait.
        waiting: deque = deque()
        for k, v, o in zip(keys, values, outs):
            parts = list(v) if isinstance(v, (list, tuple)) else [v]
            chunk = k in self._staged
            if not chunk and wire.whole_as_is:  # as it is
                self._pushpull(k, v, o, priority, k)
                continue
            if chunk and len(waiting) == self.staging.slots > 0:
                self._land(*waiting.popleft())
            bufs = wire.stage(k, parts, self.staging, chunk)
            staged = bufs if len(bufs) > 1 else bufs[0]
            self._pushpull(wire.key(k), staged, staged, priority, (k, id(bufs[0])))
            if chunk:
                waiting.append((k, bufs, o))
            else:
                wire.land(bufs, o)
        for k, bufs, o in waiting:
            self._land(k, bufs, o)

    def _land(self, key: int, bufs, out) -> None:
        """Chunk ``key``'s sum, from its staging arrays ``bufs`` into the gradient ``out``."""
        self.wire.land(bufs, out)
        if self.landed is not None:
            self.landed(key)

    def _pushpull(self, key: int, value, out, priority: int, name) -> None:
        """One MXNet key's pushpull, prepared once under ``name`` (see
        gluondist.kv.calls) where it pulls into what it pushes."""
        if NODE.compression is not None:
            self._kv.push(key, value, priority=priority)  # 2-bit refuses pushpull
            return self._kv.pull(key, out=out, priority=priority)
        if out is value and self._calls is not None:
            values = value if isinstance(value, (list, tuple)) else [value]
            return self._calls.pushpull(name, self._kv, key, values, priority)
        return self._kv.pushpull(key, value, out=out, priority=priority)

    def wire_keys(self) -> List[int]:
        """The wire's own keys (key_factor 2, fp16's float16 ones), in the order of the
        chunks."""
        first = int(self._first[0]) if self._first else 0
        return [self.wire.key(first + j) for j in range(self._count)]

    def check_compression(self) -> None:
        """After the step's pushpulls: the wire's check (fp16's overflow)."""
        self.wire.check()

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        keys, outs = self._split(key, out)  # sparse parameters are never chunked
        return self._kv.row_sparse_pull(keys, out=outs, priority=priority, row_ids=row_ids)

    def set_optimizer(self, optimizer):
        return self._kv.set_optimizer(optimizer)

    def is_capable(self, capability):
        return self._kv.is_capable(capability)

    def save_optimizer_states(self, fname, dump_optimizer=False):
        return self._kv.save_optimizer_states(fname, dump_optimizer)

    def load_optimizer_states(self, fname):
        return self._kv.load_optimizer_states(fname)

    @property
    def type(self):
        return self._kv.type

    @property
    def rank(self):
        return self._kv.rank

    @property
    def num_workers(self):
        return self._kv.num_workers

    def __getattr__(self, name):  # _barrier, set_gradient_compression, _updater, ...
        return getattr(self._kv, name)


class TrainStep:
    """The optimizer step of one batch, right for the trainer's kvstore mode.

    ``step.loss_scale(local_count)`` is the factor for this worker's losses before backward;
    ``step(global_count)`` then applies the update. Sync modes (one process, devices,
    ``dist_sync``) apply the mean gradient of the whole global batch, clipped to the global norm
    ``clip`` if given. ``dist_async`` servers apply each worker's gradient alone with a scale
    fixed at trainer creation (``batch_size``), so a short batch is rescaled through the loss;
    there is no global gradient at step time, so ``clip`` applies to each worker's own mean
    gradient, before it is pushed. An empty share (a worker's part of a tiny last
    global batch) gets scale 0: it pushes zeros and keeps in step with the others."""

    def __init__(self, trainer, kv, ctxs, batch_size: int, clip: Optional[float] = None,
                 accumulate: int = 1):
        self.trainer, self.ctxs, self.batch_size, self.clip = trainer, list(ctxs), batch_size, clip
        self.mode = Mode.of(kv)
        self.distributed = self.mode is not None and self.mode.distributed
        self.async_mode = self.distributed and self.mode.updates_on_servers
        # In dist_async the servers apply the optimizer to every push: sums of metrics or flags
        # through the kvstore are impossible there, so each worker decides alone.
        self.agree = self.mode is not None and self.mode.needs_agreement
        self.accumulate, self._pending, self._batches = accumulate, 0, 0
        kv = trainer._kvstore
        # chunked gradients updated as their sums come back (gluondist.kv.updates)
        self.chunk_updates = ChunkUpdates.of(trainer, kv, clip) \
            if isinstance(kv, _KeyedStore) and chunk_updates_from_env() else None
        # With accumulation backward adds to the gradients until an update clears them; set
        # either way, so that a net trained before with accumulation writes again.
        for p in trainer._params:
            if p.grad_req != "null":
                p.grad_req = "add" if accumulate > 1 else "write"
                p.zero_grad()

    def loss_scale(self, local_count: int) -> float:
        if local_count == 0:
            return 0.0
        return self.batch_size / local_count if self.async_mode else 1.0

    def __call__(self, global_count: int, clock=None) -> None:
        """After backward of one batch: update now, or (``accumulate=k``) every k-th batch
        with the sum of the k batches' gradients, as one batch of all their samples. A
        ``clock`` (see :mod:`gluondist.training.timing`) gets the push/pull and update phases."""
        self._pending += global_count
        self._batches += 1
        if self._batches == self.accumulate:
            self.flush(clock)

    def flush(self, clock=None) -> None:
        """Apply what has accumulated (fit calls it at the end of every epoch)."""
        if self._batches == 0:
            return
        self._update(self._pending, clock)
        self._pending = self._batches = 0
        if self.accumulate > 1:
            for p in self.trainer._params:
                if p.grad_req != "null":
                    p.zero_grad()

    def _update(self, global_count: int, clock=None) -> None:
        trainer = self.trainer
        if self.async_mode:  # the servers update: push and pull are the whole step
            count = self.batch_size * self.accumulate  # the scale fixed on the servers
            if self.clip is not None:  # clip this worker's own gradient before it goes
                devices.clip_local_norm(trainer, self.ctxs, self.clip * count)
            trainer.step(count)
            if clock is not None:
                clock.lap("sync")
            return
        early = self.chunk_updates if self.chunk_updates is not None and \
            self.chunk_updates.begin(global_count) else None
        if early is not None:
            trainer._kvstore.landed = early.landed
        try:
            trainer.allreduce_grads()  # a no-op without a kvstore
        finally:
            if early is not None:
                trainer._kvstore.landed = None
        if isinstance(trainer._kvstore, _KeyedStore):
            trainer._kvstore.check_compression()
        if clock is not None:
            clock.lap("sync")
        if self.clip is not None:
            devices.clip_global_norm(trainer, self.ctxs, self.clip * global_count)  # sums
        if early is not None:
            early.finish()
        else:
            trainer.update(global_count)
        if clock is not None:
            clock.lap("compute")

    def average_untrained(self) -> None:
        """Make every copy of each parameter that gradients do not train (BatchNorm's running
        mean and variance, anything with ``grad_req='null'``) the mean over this process's
        devices and, in ``dist_sync``, over all workers. Every worker must call it together."""
        fixed = [p for p in self.trainer._params if p.grad_req == "null"]
        if not fixed:
            return
        means = [mx.nd.add_n(*[d.as_in_context(mx.cpu()) for d in p.list_data()])
                 / len(p.list_data()) for p in fixed]
        if self.agree:
            flat = np.concatenate([m.asnumpy().ravel().astype(np.float64) for m in means])
            flat = NODE.allreduce(flat) / NODE.num_workers()
            means, at = [], 0
            for p in fixed:
                size = int(np.prod(p.shape))
                means.append(mx.nd.array(flat[at:at + size].reshape(p.shape), dtype=p.dtype))
                at += size
        for p, mean in zip(fixed, means):
            devices.assign(p, mean)

