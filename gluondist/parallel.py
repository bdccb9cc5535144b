"""One worker's devices: data-parallel mode (each device a copy of the net, a part of the batch)
and pipeline mode (:class:`Pipeline`: the net's stages, one per device), and the registry of
fit's ``parallel=`` modes.

The device helpers live in :mod:`gluondist.devices` and the pipeline in
:mod:`gluondist.pipeline`; this module is their public door (``gluondist.parallel.split``,
``gluondist.parallel.Pipeline``, ...). What the copied recipe gets wrong, and what is done
instead, is in :mod:`gluondist.devices`; and ``data.async_batch_split(2)`` does not exist:
``gluon.utils.split_and_load`` is its real form.

A mode of ``parallel=`` is one :class:`ParallelMode` subclass, found by its ``name``
(:func:`register_mode` adds one, :func:`mode` finds it): how many copies of the net the
kvstore reduces over, what runs a batch, where batches are loaded, its trainer and its checks.
fit and evaluate ask the mode; none compares names.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple, Type

import numpy as np

from ._mx import mx
from .devices import (Contexts, assign, clip_global_norm, clip_local_norm,  # noqa: F401
                      contexts, forward_backward, initialize, is_initialized, settle, split)
from .kv.trainer import make_trainer
from .pipeline import Pipeline, check_micro_batches  # noqa: F401


class ParallelMode:
    """A mode of fit's ``parallel=``: how one worker's net and batches are spread over its
    devices. Subclass it, give it a ``name``, and :func:`register_mode` it; fit then takes
    ``parallel=name``. This class itself is ``'data'``'s defaults: every device a copy of the
    net, a batch split across them."""

    name = ""  # what parallel= takes
    description = ""  # what the mode does, for messages
    options: Tuple[str, ...] = ()  # fit's arguments that only this mode takes
    options_text = ""  # what they do, for messages ("split a net into a pipeline")

    def check(self, args, ctxs: List["mx.Context"], mode) -> None:
        """Refuse, in one line, what this mode cannot train: fit's arguments ``args`` (a
        :class:`~gluondist.training.arguments.FitArgs`), its devices ``ctxs`` and the kvstore
        mode ``mode`` (a :class:`~gluondist.kv.kinds.Mode`, or None)."""

    def copies(self, ctxs: Sequence["mx.Context"]) -> int:
        """The net's copies on this worker, over which a kvstore reduces: one per device."""
        return len(ctxs)

    def prepare(self, args, ctxs: List["mx.Context"], train,
                batch_size: int) -> Tuple[object, List["mx.Context"]]:
        """``(model, data contexts)``: what runs a batch (called as ``model(x)``), its
        parameters initialised, and the contexts a batch is split across and loaded on.
        ``train`` is fit's training data source (``train.load(indices, [ctx])``)."""
        initialize(args.net, ctxs)
        return args.net, list(ctxs)

    def holds(self, net) -> bool:
        """True when ``net`` (given to evaluate or predict) is this mode's model."""
        return False

    def eval_contexts(self, net, ctxs: List["mx.Context"]) -> List["mx.Context"]:
        """The contexts evaluate and predict load batches on for ``net``, which is placed
        there first."""
        initialize(net, ctxs)  # moved to ctxs, values kept
        return list(ctxs)

    def make_trainer(self, model, optimizer, optimizer_params, kvstore, num_contexts: int,
                     batch_size: int, compression=None):
        """The trainer of ``model`` (see :func:`gluondist.kvstore.make_trainer`)."""
        return make_trainer(model.collect_params(), optimizer, optimizer_params, kvstore,
                            num_contexts, batch_size, compression=compression)


class DataParallel(ParallelMode):
    """``parallel='data'``: each device a copy of the net and a part of every batch; a kvstore
    sums the copies' gradients."""

    name = "data"
    description = "each device a copy of the net"
    options = ("sync_batchnorm",)
    options_text = "normalise over the whole job's batch"

    def check(self, args, ctxs, mode) -> None:
        if args.kvstore is None and len(ctxs) > 1:
            raise ValueError(f"kvstore=None on {len(ctxs)} devices would train each device's "
                             "copy of the net on its own part of the batch (the copies drift "
                             "apart); use kvstore='auto' or 'device', or one device")


class PipelineParallel(ParallelMode):
    """``parallel='pipeline'``: the net's stages on the devices (:class:`Pipeline`), each batch
    in ``micro_batches`` parts loaded on the last stage, one trainer over every stage."""

    name = "pipeline"
    description = "the net split into stages, one per device"
    options = ("micro_batches", "stages")
    options_text = "split a net into a pipeline"

    def check(self, args, ctxs, mode) -> None:
        if mode is not None and mode.updates_on_servers:
            raise ValueError(f"parallel='pipeline' updates on the workers; kvstore "
                             f"{str(mode)!r} runs the optimizer on the servers: use dist_sync")

    def copies(self, ctxs) -> int:
        return 1  # one copy of the net, spread across the devices

    def prepare(self, args, ctxs, train, batch_size):
        check_micro_batches(args.micro_batches, batch_size)
        sample = train.load(np.arange(1), [mx.cpu()])[0][0]  # shapes, to balance the stages
        pipe = Pipeline(args.net, ctxs, args.stages, sample=sample)
        # every micro-batch on the last stage, whose outputs meet the labels there
        return pipe, [pipe.output_context] * args.micro_batches

    def holds(self, net) -> bool:
        return isinstance(net, Pipeline)

    def eval_contexts(self, net, ctxs):
        return [net.output_context]  # its stages stay where they are; ctx is ignored

    def make_trainer(self, model, optimizer, optimizer_params, kvstore, num_contexts,
                     batch_size, compression=None):
        return make_trainer(model, optimizer, optimizer_params, kvstore, num_contexts,
                            batch_size, compression=compression)


MODES: Dict[str, ParallelMode] = {}


def register_mode(cls: Type[ParallelMode]) -> Type[ParallelMode]:
    """Make the mode ``cls`` (a :class:`ParallelMode` subclass) known to fit's ``parallel=``
    by its ``name``, and to evaluate and predict by :meth:`~ParallelMode.holds`; returns
    ``cls`` (a class decorator). Raises ValueError for a name another class has."""
    if not (isinstance(cls, type) and issubclass(cls, ParallelMode)):
        raise ValueError(f"register_mode takes a subclass of ParallelMode, not {cls!r}")
    if not isinstance(cls.name, str) or not cls.name:
        raise ValueError(f"{cls.__name__}.name must be a non-empty string, not {cls.name!r}")
    taken = MODES.get(cls.name)
    if taken is not None and type(taken) is not cls:
        raise ValueError(f"parallel mode {cls.name!r} is {type(taken).__name__} already; give "
                         f"{cls.__name__} another name")
    MODES[cls.name] = cls()
    return cls


def mode(name: str, argument: str = "parallel") -> ParallelMode:
    """The mode registered as ``name``; ValueError in one line naming every mode if none is."""
    found = MODES.get(name) if isinstance(name, str) else None
    if found is None:
        known = [f"{m.name!r} ({m.description})" if m.description else repr(m.name)
                 for m in MODES.values()]
        raise ValueError(f"{argument} must be {', '.join(known[:-1])} or {known[-1]}, not "
                         f"{name!r}" if len(known) > 1 else
                         f"{argument} must be {known[0]}, not {name!r}")
    return found


def mode_of(net) -> ParallelMode:
    """The mode whose model ``net`` is (a :class:`Pipeline`: ``'pipeline'``), else
    ``'data'``."""
    for found in MODES.values():
        if found.holds(net):
            return found
    return MODES["data"]


register_mode(DataParallel)
register_mode(PipelineParallel)
