"""The optimizer step of a chunked gradient, piece by piece as the sums come back from the
servers (:class:`ChunkUpdates`), so that the update of one piece runs while the next chunks are
still on the wire instead of after the last pull."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from .._mx import mx

# Bytes of a parameter updated at once, at least: consecutive chunks are updated together once
# all have landed. Each update is several Python calls (the optimizer's update() and its count,
# learning rate and state): at 64 KiB chunks one per chunk would be 128 a step for an 8 MB
# layer, in runs of 512 KiB (the default chunk) 16, whose last is the only update left after
# the step's last pull.
UPDATE_BYTES = 1 << 19

# Optimizers whose update of an element reads only that element of the weight, the gradient
# and the states: updating views of a chunk is then the same arithmetic as updating the whole
# array, and tests/training/test_chunk_updates.py checks each is bit-equal. Not here: LARS, LAMB,
# LBSGD (norms of the whole array), SGLD (random noise drawn per call), Nadam (a schedule
# advanced on every call), DCASGD (a copy of the previous weight), and any subclass, which may
# change update().
ELEMENTWISE = tuple(getattr(mx.optimizer, name) for name in (
    "SGD", "NAG", "Adam", "RMSProp", "AdaGrad", "AdaDelta", "Signum", "Ftrl", "Adamax", "FTML"))


class ChunkUpdates:
    """Updates a chunked parameter piece by piece as the chunks' sums land in the gradient.

    ``trainer.update()`` after the last pull would apply the optimizer to every parameter
    after the whole step's traffic; here the kvstore calls :meth:`landed` for each chunk it
    copies back, and once every chunk of a group (consecutive chunks of at least
    :data:`UPDATE_BYTES`) has landed, the group's update is issued on views of the weight, the
    gradient and the optimizer's states (MXNet's engine runs it once the copies are done, while
    later chunks are still travelling). The other parameters are updated as before, after the
    last pull. Update counts (and so learning-rate schedules and Adam's bias correction)
    advance once per step, as with one update of the whole array.

    Only where the result is the same: a plain ``gluon.Trainer`` updating on the workers, an
    optimizer of :data:`ELEMENTWISE`, no gradient clipping (which needs every chunk's sum
    first), no wire format with a check after the pulls (fp16's overflow) and no AMP loss
    scaler. :meth:`of` returns None otherwise."""

    def __init__(self, trainer, kv, update_bytes: Optional[int] = None):
        self.trainer = trainer
        update_bytes = UPDATE_BYTES if update_bytes is None else update_bytes
        # consecutive chunks of a parameter, updated together once all have landed: MXNet key
        # -> its group; a group: (parameter index, first element, end, its chunks, whether
        # the parameter's last)
        self._group_of: Dict[int, int] = {}
        self._groups: List[Tuple[int, int, int, int, bool]] = []
        for index, (first, bounds) in enumerate(zip(kv._first, kv._chunks)):
            if len(bounds) < 2:
                continue
            per = max(1, update_bytes // np.dtype(trainer._params[index].dtype).itemsize)
            start = 0
            for j, (a, b) in enumerate(bounds):
                self._group_of[int(first) + j] = len(self._groups)
                last = j == len(bounds) - 1
                if last or b - bounds[start][0] >= per:
                    self._groups.append((index, bounds[start][0], b, j + 1 - start, last))
                    start = j + 1
        self._landed = [0] * len(self._groups)  # chunks of each group landed this step
        self._views: dict = {}  # (group, device) -> (the arrays sliced, their views)

    @classmethod
    def of(cls, trainer, kv, clip: Optional[float]) -> Optional["ChunkUpdates"]:
        """The chunk updates of ``trainer`` through ``kv`` (its kvstore as
        :class:`~gluondist.kv.trainer.TrainStep` sees it, which calls :meth:`landed`), or None
        where they would change the result (see the class) or no gradient is chunked."""
        if trainer._update_on_kvstore or clip is not None or not kv.wire.final_on_landing:
            return None
        if type(trainer)._update is not mx.gluon.Trainer._update or \
                type(trainer._optimizer) not in ELEMENTWISE:
            return None
        updates = cls(trainer, kv)
        return updates if updates._groups else None

    def begin(self, global_count: int) -> bool:
        """Before the step's pushes: the gradient scale set and every gradient checked fresh,
        as ``trainer.update`` would; False (update after the pulls) under an AMP loss scaler,
        which must see every gradient before any update."""
        trainer = self.trainer
        if getattr(trainer, "_amp_loss_scaler", None) is not None:
            return False
        for param in trainer._params:
            if param.grad_req == "null":
                continue
            for data in param.list_data():
                if not data._fresh_grad:  # Trainer's own message (ignore_stale_grad=False)
                    raise UserWarning(
                        f"Gradient of Parameter `{param.name}` on context {data.context} has "
                        "not been updated by backward since last `step`. This could mean a "
                        "bug in your model that made it only use a subset of the Parameters "
                        "(Blocks) for this iteration.")
        trainer._check_and_rescale_grad(trainer._scale / global_count)
        self._landed = [0] * len(self._groups)
        return True

    def landed(self, key: int) -> None:
        """MXNet key ``key``'s sum was copied into the gradient (one copy per device): once
        every chunk of its group has, issue the group's update on every device."""
        group = self._group_of.get(key)
        if group is None:
            return
        self._landed[group] += 1
        index, a, b, size, last = self._groups[group]
        if self._landed[group] < size:
            return
        param = self.trainer._params[index]
        opt = self.trainer._optimizer
        for device, (updater, weight, grad) in enumerate(
                zip(self.trainer._updaters, param.list_data(), param.list_grad())):
            opt._set_current_context(weight.context.device_id)
            state = _state(updater, index, weight)
            w, g, s = self._slice(group, device, weight, grad, state, a, b)
            counts, num = opt._index_update_count, opt.num_update
            before = counts.get(index)
            opt.update_multi_precision(index, w, g, s)
            if last:
                weight._fresh_grad = False  # so trainer._update skips it
            else:  # the count advances once per step: with the parameter's last group
                if before is None:
                    del counts[index]
                else:
                    counts[index] = before
                opt.num_update = num

    def finish(self) -> None:
        """After the last pull: the parameters that were not chunked, updated whole."""
        self.trainer._update(ignore_stale_grad=True)  # chunked ones are no longer fresh

    def _slice(self, group, device, weight, grad, state, a: int, b: int):
        """Views of elements ``[a, b)`` of the weight, gradient and states, kept while the
        arrays are the same ones (Trainer passes the same every step; slicing costs more
        than the update of a small chunk)."""
        arrays = [weight, grad] + _leaves(state)
        kept = self._views.get((group, device))
        if kept is None or len(kept[0]) != len(arrays) or \
                any(x is not y for x, y in zip(kept[0], arrays)):
            cut = iter([x.reshape((-1,))[a:b] for x in arrays])
            views = (next(cut), next(cut), _rebuild(state, cut))
            kept = self._views[group, device] = (arrays, views)
        return kept[1]


def _state(updater, index: int, weight):
    """The updater's state for ``index``, made for the whole weight if it has none yet (as
    ``Updater.__call__`` does)."""
    if index not in updater.states:
        updater.states[index] = updater.optimizer.create_state_multi_precision(index, weight)
        updater.states_synced[index] = True
    elif not updater.states_synced[index]:
        updater.states[index] = updater.sync_state_context(updater.states[index],
                                                           weight.context)
        updater.states_synced[index] = True
    return updater.states[index]


def _leaves(state) -> List:
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        return [leaf for part in state for leaf in _leaves(part)]
    return [state]


def _rebuild(state, views):
    """``state``'s structure with each array replaced by the next of ``views``."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(_rebuild(part, views) for part in state)
    return next(views)
