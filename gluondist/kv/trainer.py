"""The trainer of every mode (:func:`make_trainer`): a ``gluon.Trainer`` whose step is one
:class:`~gluondist.kv.exchange.Exchange`, with kvstore semantics that are right, big gradients
cut into chunks that pipeline, and the optimizer step of one batch for each mode
(:class:`TrainStep`). See :mod:`gluondist.kvstore` for what the copied recipes get wrong."""
from __future__ import annotations

import json
import os
from functools import partial
from typing import List, Optional, Tuple

import numpy as np

from .. import _mx, devices, envvars as ev
from .._mx import mx
from . import compression as cmp, tuning
from .chunks import (CHUNK_BYTES, backward_share_from_env, chunk_bounds, chunk_bytes_from_env,
                     chunk_updates_from_env, chunks_in_flight_from_env, fuse_bytes_from_env)
from .exchange import Exchange
from .kinds import Mode
from .node import NODE
from .safepickle import check_sendable
from .staging import Staging
from .updates import Updates
from ..pipeline import Pipeline

def make_trainer(params, optimizer="sgd", optimizer_params=None, kvstore="auto",
                 num_contexts: int = 1, batch_size: Optional[int] = None,
                 chunk_bytes: Optional[int] = None, compression=None) -> "Trainer":
    """A :class:`Trainer` (a ``gluon.Trainer``) whose kvstore semantics are right, ready for the
    first step.

    ``kvstore`` is a kind (see :func:`create`) or a KVStore. Sync modes update on the workers;
    ``dist_async`` on the servers. With a distributed kvstore the parameters must already be
    initialised with known shapes (run one forward pass first): they are broadcast from worker
    0 and every worker waits at a barrier before this returns, so the first pull cannot race a
    gradient push. Call ``step()`` with the *global* batch size.

    ``dist_async`` applies each worker's gradient alone, with a scale fixed when the optimizer
    is sent to the servers (here): give ``batch_size``, the local size every ``step()`` uses.

    Any number of trainers may be made in one process, one after another: each gets kvstore
    keys of its own. Every worker must make the same sequence of trainers (checked in
    ``dist_sync``).

    In a dist_sync job each gradient of more than ``chunk_bytes`` (0: whole; default
    ``GLUONDIST_CHUNK_BYTES``, else the job's choice, :mod:`gluondist.kv.tuning`) travels in
    chunks of about that size, on keys of their own, at most :data:`CHUNKS_IN_FLIGHT` per
    server in flight, each updated as its sum comes back (:mod:`gluondist.kv.exchange`), and
    runs of smaller ones fused on one key up to that size (or ``GLUONDIST_FUSE_BYTES``).

    ``params``: a ParameterDict, a list of Parameters, or a
    :class:`~gluondist.pipeline.Pipeline` (whose parameters each live on their stage's device).

    ``compression`` (dist_sync): None, a registered wire format's name (``"fp16"``, ``"2bit"``)
    or its dict form (``{"type": "2bit", "threshold": t}``; see
    :mod:`gluondist.kv.compression`); chunks are compressed alone."""
    compression = cmp.parse(compression)
    params, stages, num_contexts = _parameters(params, num_contexts)
    chunk_bytes, in_flight, share = _chunking(chunk_bytes)
    kv = NODE.create(kvstore, num_contexts) if isinstance(kvstore, str) or kvstore is None \
        else kvstore
    mode = Mode.of(kv)
    cmp.check_mode(compression, mode)
    if stages and mode is not None and mode.updates_on_servers:
        raise ValueError("a pipeline updates on the workers: use dist_sync (or no kvstore), "
                         "not a kvstore that runs the optimizer (dist_async)")
    _check_optimizer(optimizer, optimizer_params)
    # after the caller's inference passes: the kvstore cannot send a weight they left in
    # oneDNN's layout, and a training forward would reorder it behind the first update
    devices.settle(params)
    trainer = Trainer(params, optimizer, optimizer_params, stages)
    updates = trainer.exchange.updates
    if mode is not None and mode.distributed:
        trainer.exchange = _distributed(
            kv, mode, params, updates, chunk_bytes, in_flight, share, compression,
            None if batch_size is None else _mx.grad_scale(trainer) / batch_size)
    elif kv is not None:
        _check_sendable(params, dense_only=True, sparse="")
        trainer.exchange = Exchange(params, updates, kv)
        # device 0's values on every device now, not in the first step: MXNet would copy
        # device 0's BatchNorm statistics over the others after that batch's forward, so a run
        # resumed mid-epoch would differ from one that was not (the copy falls on another batch)
        if not any(_mx.deferred(p) for p in params):
            trainer.exchange.join()
    return trainer


class Trainer(_mx.Trainer):
    """What :func:`make_trainer` returns: a ``gluon.Trainer`` whose ``step``,
    ``allreduce_grads`` and ``update`` go through its :attr:`exchange`, and whose
    ``save_states`` and ``load_states`` write and read the optimizer's state without pickles:
    its arrays, update counts and type, and its and its scheduler's plain attributes (the
    learning rate), which ``load_states`` restores as ``gluon.Trainer``'s does."""

    def __init__(self, params, optimizer, optimizer_params=None, stages: bool = False):
        super().__init__(params, optimizer, optimizer_params, kvstore=None)
        self.exchange = Exchange(params, Updates(params, self.optimizer, stages))

    def step(self, batch_size, ignore_stale_grad=False):
        check_amp(self)
        exchange = self.exchange
        exchange.rescale(_mx.grad_scale(self) / batch_size)
        exchange.reduce(early=not ignore_stale_grad, check=True)  # fp16: before the update
        exchange.update(ignore_stale_grad)

    def allreduce_grads(self):
        self._check_sync("allreduce_grads")
        self.exchange.reduce()

    def update(self, batch_size, ignore_stale_grad=False):
        self._check_sync("update")
        check_amp(self)
        self.exchange.rescale(_mx.grad_scale(self) / batch_size)
        self.exchange.update(ignore_stale_grad)

    def set_learning_rate(self, lr):
        self._check_sync("set_learning_rate")
        if self.optimizer.lr_scheduler is not None:  # MXNet raises from inside the optimizer
            raise ValueError("set_learning_rate with an lr_scheduler, which sets the rate each "
                             "step: change the scheduler's base_lr, or train without one")
        super().set_learning_rate(lr)

    def save_states(self, fname):
        self._check_sync("save_states")
        arrays: dict = {}
        meta = self.exchange.updates.dump(arrays, lambda _, array: array.copyto(mx.cpu()))
        arrays[STATES_META] = mx.nd.array(np.frombuffer(json.dumps(meta).encode(), np.uint8),
                                          dtype="uint8")
        try:
            mx.nd.save(fname, arrays)
        except mx.base.MXNetError as exc:  # a missing directory, a full disk
            raise OSError(f"cannot write trainer states to {fname} ({_reason(exc)})") from None

    def load_states(self, fname):
        self._check_sync("load_states")
        try:
            with open(fname, "rb") as f:
                pickled = f.read(1) == b"\x80"  # gluon.Trainer.save_states' pickle
            arrays = {} if pickled else mx.nd.load(fname)
            meta = json.loads(arrays.pop(STATES_META).asnumpy().tobytes()) \
                if isinstance(arrays, dict) and STATES_META in arrays else None
        except (OSError, ValueError, mx.base.MXNetError) as exc:  # missing, not MXNet's
            raise ValueError(f"cannot read trainer states from {fname} ({_reason(exc)}); give "
                             "a file that save_states wrote") from None
        if meta is None:
            raise ValueError(f"{fname} holds no trainer states written by gluondist's "
                             "save_states (gluon.Trainer's are pickles, which it does not read)")
        try:
            self.exchange.updates.load(meta, arrays, settings=True)
        except ValueError as exc:
            raise ValueError(f"cannot load {fname} into this trainer: {exc}") from None

    def _check_sync(self, what: str) -> None:
        if self.exchange.servers_update:
            raise ValueError(f"{what}() under dist_async, where the servers hold the optimizer "
                             "and update: set the optimizer before make_trainer and call step() "
                             "(or use dist_sync)")


def _reason(exc: BaseException) -> str:
    """An error's own words: MXNet's last line, not its C++ stack."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else type(exc).__name__


def check_amp(trainer) -> None:
    """Refuse AMP's loss scaling, in one line."""
    if _mx.loss_scaler(trainer) is not None:
        raise ValueError("AMP's loss scaling (amp.init_trainer) is not supported by "
                         "gluondist's trainer: train without it")


def _check_optimizer(optimizer, optimizer_params) -> None:
    if isinstance(optimizer, mx.optimizer.Optimizer) and optimizer_params:
        raise ValueError("give optimizer_params only with an optimizer name: an "
                         "mx.optimizer.Optimizer instance carries its own settings")


STATES_META = "gluondist.states"  # the JSON part of save_states' file, as uint8


def _parameters(params, num_contexts: int) -> Tuple[list, bool, int]:
    """``params`` as a list, whether each lives on one device of its own (a Pipeline's), and
    the devices whose copies are summed: at least as many as the parameters live on."""
    stages = isinstance(params, Pipeline)
    if stages:
        params = params.collect_params()
    # A list, in the net's own order: given a dict, Trainer sorts it by the parameters' global
    # names (dense9_ after dense10_), so the indices that optimizer states are kept under
    # would depend on how many layers the process had made before.
    params = list(params.values()) if hasattr(params, "values") else list(params)
    if not params:
        raise ValueError("make_trainer got no parameters: give a net's collect_params() (or a "
                         "list of its Parameters)")
    sparse = [p.name for p in params if _mx.storage(p)[0] != "default"]
    if sparse:  # settle (list_data) would fail inside MXNet
        raise ValueError(f"parameter {sparse[0]} has row_sparse weights, which gluondist's "
                         "trainers cannot hold: make it dense (sparse_grad=True keeps the "
                         "gradients sparse)")
    if not stages:
        num_contexts = max(num_contexts, len(params[0].list_ctx()))
    return params, stages, num_contexts


# What MXNet's parameter servers can hold and sum: an array of another dtype aborts the server at
# its first push ("This operation only support floating point types"), even one that no
# gradient trains (the initial broadcast pushes every parameter)
SUMMABLE = ("float16", "float32", "float64")


def _check_sendable(params, dense_only: bool = False, sparse: str = "") -> None:
    """Refuse, in one line, a parameter that a job's kvstore would fail on (``dense_only``:
    only a sparse one, for a kvstore of this process's devices). Row-sparse gradients of a
    dense weight travel as rows in a dist_sync job (``sparse``: why not here, else "")."""
    for p in params:
        stype, grad_stype = _mx.storage(p)
        if stype == "default" and grad_stype == "row_sparse" and not sparse:
            continue
        if stype != "default" or grad_stype != "default":
            kind = grad_stype if grad_stype != "default" else stype
            where = sparse or "as row_sparse weights"
            raise ValueError(
                f"parameter {p.name} is {kind} (Embedding(..., sparse_grad=True) gives row_sparse "
                f"gradients), which gluondist's trainers cannot exchange {where}: make it dense "
                "(sparse_grad=False)")
        dtype = np.dtype(p.dtype).name
        if not dense_only and dtype not in SUMMABLE:
            raise ValueError(
                f"parameter {p.name} is {dtype}, and a job's servers hold only "
                f"{', '.join(SUMMABLE)} arrays: cast it (net.cast('float32')) or leave it out "
                "of the trainer's parameters")


def _chunking(chunk_bytes: Optional[int]) -> Tuple[Optional[int], int, Optional[float]]:
    """``chunk_bytes`` (None: GLUONDIST_CHUNK_BYTES's, if set), the chunks in flight per
    server and GLUONDIST_BACKWARD_SHARE, from the environment, whose chunk settings are refused
    here in one line in any process, GLUONDIST_CHUNK_UPDATES too."""
    if chunk_bytes is None and ev.GLUONDIST_CHUNK_BYTES in os.environ:
        chunk_bytes = chunk_bytes_from_env()
    fuse_bytes_from_env(CHUNK_BYTES if chunk_bytes is None else chunk_bytes)
    in_flight = chunks_in_flight_from_env()
    chunk_updates_from_env()
    return chunk_bytes, in_flight, backward_share_from_env()


def _distributed(kv, mode: Mode, params, updates: Updates, chunk_bytes: Optional[int],
                 in_flight: int, share: Optional[float], compression: Optional[cmp.Compression],
                 async_scale: Optional[float]) -> Exchange:
    """The exchange of a job's trainer, joined: keys of its own, in chunks (None: the job's
    chosen size, gluondist.kv.tuning); worker 0's parameters everywhere, (dist_async) the
    optimizer on the servers, every worker past a barrier."""
    servers_update = mode.updates_on_servers
    pending = [p.name for p in params if _mx.deferred(p)]
    if pending:
        raise ValueError(
            f"parameters {', '.join(pending[:3])} have unknown shapes; run one forward pass "
            "(or give in_units) before make_trainer so worker 0 can broadcast them")
    _check_sendable(params, sparse="under dist_async" if servers_update else
                    "with compression" if compression is not None else "")
    if chunk_bytes is None:
        chunk_bytes = tuning.chunk_bytes(kv, params, compression,
                                         partial(make_trainer, kvstore=kv))
    # dist_async's servers run the optimizer, which needs each parameter whole (its state,
    # lr_mult by name, LARS' and LAMB's norms): only updates on the workers are chunked
    chunks = [parameter_chunks(p, 0 if servers_update else chunk_bytes) for p in params]
    count = sum(map(len, chunks))
    wire = (compression or cmp.FLOAT32).bind(kv.num_workers, count)
    wire.check_params(params)
    # key_factor 2 (fp16): the wire's keys after the float32 ones that broadcast the parameters
    fuse_bytes = fuse_bytes_from_env(chunk_bytes)
    offset = NODE.reserve_keys(kv, count * wire.key_factor, not servers_update,
                               compression.code if compression is not None else 0.0, fuse_bytes)
    NODE.compress(kv, compression)  # kvstore-wide (2bit): before this trainer's keys are made
    if servers_update:
        if async_scale is None:
            raise ValueError("dist_async needs make_trainer(..., batch_size=LOCAL_BATCH): "
                             "the servers fix the gradient scale when they get the optimizer")
        updates.optimizer.rescale_grad = async_scale
        check_sendable(updates.optimizer)  # what the servers will load, refused here first
        kv.set_optimizer(updates.optimizer)
    # the staging slots: CHUNKS_IN_FLIGHT per server (consecutive chunks go to different
    # servers), as big as the largest chunk of a gradient cut in several
    servers = int(os.environ.get(ev.DMLC_NUM_SERVER, "1"))
    staging = Staging(in_flight * servers,
                      max((b - a for c in chunks if len(c) > 1 for a, b in c), default=0))
    # small whole gradients fused (by default up to a chunk's size), spread over the servers
    exchange = Exchange(params, updates, kv, servers_update, offset, chunks, staging, wire,
                        fuse_bytes, servers, share)
    if chunk_updates_from_env():
        exchange.plan()
    exchange.join()
    return exchange


def parameter_chunks(param, chunk_bytes: int) -> List[Tuple[int, int]]:
    """A parameter's chunks (see chunk_bounds); sparse ones travel whole."""
    size = int(np.prod(param.shape))
    if _mx.storage(param) != ("default", "default"):
        return [(0, size)]
    return chunk_bounds(size, np.dtype(param.dtype).itemsize, chunk_bytes)


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
        self.exchange = getattr(trainer, "exchange", None)
        if not isinstance(self.exchange, Exchange):
            raise ValueError(f"TrainStep takes a trainer made by gluondist.kvstore.make_trainer, "
                             f"not a {type(trainer).__name__}: make it with make_trainer")
        if self.mode != Mode.of(self.exchange.kv):
            raise ValueError(f"TrainStep was given kvstore {self.mode or 'None'!r}, and the "
                             f"trainer exchanges through {Mode.of(self.exchange.kv)!r}: give "
                             "the kvstore make_trainer got")
        # chunked gradients updated as their sums come back (gluondist.kv.updates): only
        # where each chunk's sum is final when it lands, not before a global norm's clipping
        self.chunk_updates = self.exchange.early and clip is None
        # With accumulation backward adds to the gradients until an update clears them; set
        # either way, so that a net trained before with accumulation writes again.
        rows = [p.name for p in self.exchange.params if p.grad_req != "null" and
                _mx.storage(p)[1] == "row_sparse"]
        if accumulate > 1 and rows:
            raise ValueError(f"accumulate={accumulate} adds gradients over batches, and "
                             f"{rows[0]}'s are row-sparse, which MXNet's Embedding only writes: "
                             "use accumulate=1, or sparse_grad=False")
        for p in self.exchange.params:
            if p.grad_req != "null":
                p.grad_req = "add" if accumulate > 1 else "write"
                p.zero_grad()

    def loss_scale(self, local_count: int) -> float:
        # an empty share runs a stand-in sample: its rows are none of the batch's (sparse)
        self.exchange.stand_in = local_count == 0
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
            for p in self.exchange.params:
                if p.grad_req != "null":
                    p.zero_grad()

    def _update(self, global_count: int, clock=None) -> None:
        trainer = self.trainer
        check_amp(trainer)
        if self.async_mode:  # the servers update: push and pull are the whole step
            count = self.batch_size * self.accumulate  # the scale fixed on the servers
            if self.clip is not None:  # clip this worker's own gradient before it goes
                devices.clip_local_norm(trainer, self.ctxs, self.clip * count)
            trainer.step(count)
            if clock is not None:
                clock.lap("sync")
            return
        exchange = self.exchange
        exchange.rescale(_mx.grad_scale(trainer) / global_count)
        exchange.reduce(early=self.chunk_updates, check=True)  # nothing without a kvstore
        if clock is not None:
            clock.lap("sync")
        if self.clip is not None:
            devices.clip_global_norm(trainer, self.ctxs, self.clip * global_count)  # sums
        exchange.update()
        if clock is not None:
            clock.lap("compute")

    def average_untrained(self) -> None:
        """Make every copy of each parameter that gradients do not train (BatchNorm's running
        mean and variance, anything with ``grad_req='null'``) the mean over this process's
        devices and, in ``dist_sync``, over all workers. Every worker must call it together."""
        fixed = [p for p in self.exchange.params if p.grad_req == "null"]
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

