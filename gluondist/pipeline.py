"""Pipeline model parallelism: a ``Sequential`` split into stages, one per device, trained with
micro-batches (GPipe's schedule: every micro-batch's forward, then one backward over all).
The public door is :mod:`gluondist.parallel` (``parallel.Pipeline``, and fit's
``parallel='pipeline'`` mode); this module stands on :mod:`gluondist.devices` alone.

What MXNet Gluon lacks, and what is done here instead:

* A hybridized block takes inputs on one context only, and ``ctx_group`` does not reach Gluon:
  the net's children are called stage by stage, each stage's input copied to its device.
* ``gluon.Trainer`` requires every parameter on the same contexts: the trainer
  :func:`gluondist.kvstore.make_trainer` makes of a pipeline (``make_trainer(pipe, ...)``)
  takes parameters that each live on one context, updating each device's group with one
  updater, so optimizer states keep the indices (and the checkpoint layout) of a one-device
  trainer (gluondist.kv.updates). One trainer spans every stage, its keys from the job's
  allocator.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from . import devices
from . import _mx
from ._mx import mx
from .trees import tree_map


def _batch_norms(block) -> List[str]:
    """The names of the BatchNorm blocks in ``block``, itself included."""
    found = [block.name] if isinstance(block, mx.gluon.nn.BatchNorm) else []
    for child in _mx.children(block):
        found += _batch_norms(child)
    return found


def check_net(net, stages: int) -> None:
    """Refuse, in one line, a net that cannot be split into ``stages`` exact stages."""
    if not isinstance(net, (mx.gluon.nn.Sequential, mx.gluon.nn.HybridSequential)):
        raise ValueError(f"a pipeline splits a gluon.nn.Sequential or HybridSequential (a "
                         f"sequence of blocks), not a {type(net).__name__}; put its layers "
                         "in one, or use parallel='data'")
    norms = _batch_norms(net)
    if norms:
        raise ValueError(f"the net holds BatchNorm ({', '.join(norms[:3])}), whose statistics "
                         "depend on the micro-batch: a pipeline would not compute the whole "
                         "batch's result; use LayerNorm, or parallel='data'")
    if stages > len(net):
        raise ValueError(f"{stages} stages (one per context) but the net has only {len(net)} "
                         "children; give fewer contexts or split the net into more blocks")


def check_micro_batches(micro_batches, batch_size: int) -> None:
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or \
            micro_batches < 1:
        raise ValueError(f"micro_batches must be an integer >= 1, not {micro_batches!r}")
    if micro_batches > batch_size:
        raise ValueError(f"micro_batches={micro_batches} exceeds the batch of {batch_size} "
                         "sample(s); lower micro_batches or raise the batch size")


def bounds_at(cuts: Sequence[int], children: int, stages: int) -> List[int]:
    """``[0, *cuts, children]`` once ``cuts`` (the user's ``stages=[3, 6]``) are checked."""
    cuts = list(cuts)
    edges = [0] + cuts + [children]
    if len(cuts) != stages - 1 or not all(isinstance(c, int) for c in cuts) or \
            not all(a < b for a, b in zip(edges, edges[1:])):
        raise ValueError(f"stages={cuts!r}: give {stages - 1} increasing child indices between "
                         f"1 and {children - 1} (where each stage after the first begins), one "
                         "fewer than the contexts")
    return edges


def balanced_bounds(sizes: Sequence[int], stages: int) -> List[int]:
    """Cut ``sizes`` (each child's parameter count) into ``stages`` contiguous non-empty runs
    whose largest sum is the smallest possible; ties go to the earliest cuts."""
    n = len(sizes)
    total = [0]
    for s in sizes:
        total.append(total[-1] + s)
    # best[k][i]: the smallest largest-stage sum of children i..n-1 in k stages, and its cut
    inf = float("inf")
    best = [[(inf, n)] * (n + 1) for _ in range(stages + 1)]
    best[0][n] = (0, n)
    for k in range(1, stages + 1):
        for i in range(n - k, -1, -1):
            best[k][i] = min((max(total[j] - total[i], best[k - 1][j][0]), j)
                             for j in range(i + 1, n - k + 2))
    cuts, at = [0], 0
    for k in range(stages, 0, -1):
        at = best[k][at][1]
        cuts.append(at)
    return cuts


def _size(block) -> int:
    return sum(int(np.prod(p.shape)) for p in block.collect_params().values())


class Pipeline:
    """``net``'s children split into one stage per context of ``ctx``, each stage's parameters
    initialised (Xavier unless ``init``, or kept if already initialised) and living only on
    its own context.

    ``stages``: the child indices where stages 2..K begin (``[3, 6]``); None balances the
    stages by parameter count, which needs the shapes: a net with deferred shapes is given one
    sample of ``sample`` (an input batch) on the CPU first. Calling the pipeline runs the
    stages in turn, copying each stage's input to its context; the output is on the last.

    Raises ValueError (one line) for a net that is not a Sequential/HybridSequential, holds
    BatchNorm, has fewer children than contexts, or for repeated contexts."""

    def __init__(self, net, ctx: devices.Contexts, stages: Optional[Sequence[int]] = None,
                 sample=None, init=None):
        ctxs = devices.contexts(ctx)
        if len(set(map(str, ctxs))) != len(ctxs):
            raise ValueError(f"pipeline contexts {[str(c) for c in ctxs]} repeat; give each "
                             "stage a device of its own")
        check_net(net, len(ctxs))
        self.net, self.contexts = net, ctxs
        children = _mx.children(net)
        if stages is not None:
            self.bounds = bounds_at(stages, len(children), len(ctxs))
        else:
            _learn_shapes(net, sample, init)
            self.bounds = balanced_bounds([_size(c) for c in children], len(ctxs))
        self.stages = [children[a:b] for a, b in zip(self.bounds[:-1], self.bounds[1:])]
        for blocks, c in zip(self.stages, ctxs):
            for block in blocks:
                _place(block, c, init)
        if sample is not None:  # deferred shapes become known, each on its stage's device
            with mx.autograd.pause():
                self(devices.split(sample[:1], ctxs[:1])[0])

    def __call__(self, x):
        """The net's output for the batch ``x`` (as ``Sequential`` computes it), on the last
        stage's context."""
        for blocks, c in zip(self.stages, self.contexts):
            # an explicit copy across the boundary (recorded by autograd)
            x = tree_map(lambda array, _: array.as_in_context(c), x)
            for block in blocks:
                x = block(x)
        return x

    forward = __call__  # what fit's checks read the inputs' names from

    @property
    def output_context(self) -> "mx.Context":
        return self.contexts[-1]

    def collect_params(self):
        return self.net.collect_params()

    def param_bytes(self) -> Dict[str, int]:
        """Bytes of parameters each context holds, by the context's name."""
        held = {str(c): 0 for c in self.contexts}
        for p in self.net.collect_params().values():
            for data in p.list_data():
                held[str(data.context)] += data.size * np.dtype(data.dtype).itemsize
        return held

    def forward_backward(self, loss_fn, data, label, micro_batches: int = 1,
                         scale: float = 1.0):
        """Forward ``micro_batches`` parts of the batch ``(data, label)`` through the stages,
        then one backward of their per-sample losses (summed, as for the whole batch: call
        ``trainer.step(batch_size)`` next). Returns ``(outputs, losses)``, one per part."""
        check_micro_batches(micro_batches, data.shape[0])
        # every part on the last stage, where the loss is: the first stage copies its input
        where = [self.output_context] * micro_batches
        return devices.forward_backward(self, loss_fn, devices.split(data, where),
                                        devices.split(label, where), where, scale)


def _learn_shapes(net, sample, init) -> None:
    """Make every parameter's shape known (to count it): a forward of one sample on the CPU
    where shapes are deferred (a net whose layers all have ``in_units`` is left alone)."""
    if all(p.shape and not any(d <= 0 for d in p.shape) for p in net.collect_params().values()):
        return
    if not devices.is_initialized(net):
        net.initialize(init or mx.init.Xavier(), ctx=mx.cpu())
    if any(_mx.deferred(p) for p in net.collect_params().values()):
        if sample is None:
            raise ValueError("the net's parameter shapes are not known yet, so the stages "
                             "cannot be balanced: pass sample= (an input batch), stages=[...], "
                             "or in_units to its layers")
        with mx.autograd.pause():
            net(devices.split(sample[:1], [mx.cpu()])[0])


def _place(block, ctx, init) -> None:
    """``block``'s parameters initialised on ``ctx``, or moved there keeping their values."""
    for p in block.collect_params().values():
        try:
            where = p.list_ctx()
        except RuntimeError:  # not initialised
            p.initialize(None, ctx, init or mx.init.Xavier())  # as Block.initialize
            continue
        if where != [ctx]:
            p.reset_ctx(ctx)

