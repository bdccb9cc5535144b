"""The optimizer's update of one trainer's parameters on the workers (:class:`Updates`): whole
parameters after the step's last pull, and a chunked gradient's pieces as their sums come back
from the servers, so that the update of one piece runs while the next chunks are still on the
wire. The one owner of the optimizer's update counts and states."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _mx
from .._mx import mx
from ..trees import Kept, leaves, tree_map

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

# A group of chunks updated together: (parameter index, first element, end, its chunks, whether
# the parameter's last)
Group = Tuple[int, int, int, int, bool]


def stale(param, weight) -> UserWarning:
    """MXNet's own message for a gradient backward did not write since the last step."""
    return UserWarning(
        f"Gradient of Parameter `{param.name}` on context {weight.context} has not been updated "
        "by backward since last `step`. This could mean a bug in your model that made it only "
        "use a subset of the Parameters (Blocks) for this iteration. If you are intentionally "
        "only using a subset, call step with ignore_stale_grad=True to suppress this warning "
        "and skip updating of Parameters with stale gradient")


class Updates:
    """The updates of ``params`` by ``optimizer``, through MXNet's public updater
    (``mx.optimizer.get_updater``): one per copy of the parameters (a device's), or one for all
    when each parameter lives on one device of its own (``stages``, a pipeline), whose devices
    then share one table of update counts, so states and counts are kept by parameter index as
    a one-device trainer keeps them and a checkpoint moves between the layouts.

    Update counts (learning-rate schedules, Adam's bias correction) advance once per step for
    each parameter, on each copy, however many pieces it is updated in."""

    def __init__(self, params: Sequence, optimizer, stages: bool = False,
                 updaters: Sequence = ()):
        self.params, self.optimizer, self.stages = list(params), optimizer, stages
        # one per copy, made as they are first needed (or a gluon.Trainer's own)
        self._by_copy: Dict[int, "mx.optimizer.Updater"] = dict(enumerate(updaters))
        self._groups: List[Group] = []  # chunk groups updated as they land (see plan)
        self._group_of: Dict[int, int] = {}  # MXNet key -> its group
        self._landed: List[int] = []
        self._done: set = set()  # parameters updated whole as their chunks landed, this step
        self._views = Kept()
        if stages:
            self.restore_counts({}, 0)

    def updater(self, copy: int) -> "mx.optimizer.Updater":
        made = self._by_copy.get(copy)
        if made is None:
            made = self._by_copy[copy] = mx.optimizer.get_updater(self.optimizer)
        return made

    def update(self, ignore_stale: bool = False, apply: bool = True) -> None:
        """Update every trained parameter whose gradient backward wrote since its last update
        (raise MXNet's UserWarning for another unless ``ignore_stale``); with ``apply`` False
        (the servers update, dist_async) only check and mark them."""
        todo: Dict[object, list] = {}
        done, self._done = self._done, set()
        for i, param in enumerate(self.params):
            if param.grad_req == "null" or i in done:
                continue
            for copy, (weight, grad) in enumerate(zip(param.list_data(), param.list_grad())):
                if not _mx.fresh(weight):
                    if ignore_stale:
                        continue
                    raise stale(param, weight)
                _mx.mark_updated(weight)
                todo.setdefault(str(weight.context) if self.stages else copy, []).append(
                    (i, grad, weight))
        if not apply:
            return
        # what an update changes on the optimizer itself (Nadam's momentum schedule) advances
        # once per step: each device's copy starts from where the step began
        opt = self.optimizer
        kept = {name: getattr(opt, name) for name in STATE_ATTRIBUTES if hasattr(opt, name)}
        for slot, group in todo.items():
            if not self.stages:  # a pipeline's devices hold different parameters: one copy
                for name, value in kept.items():
                    setattr(opt, name, value)
            index, grads, weights = zip(*group)
            self.updater(0 if self.stages else slot)(list(index), list(grads), list(weights))

    # pieces of chunked gradients

    def plan(self, first_keys: Sequence[int], chunks: Sequence[Sequence[Tuple[int, int]]],
             update_bytes: Optional[int] = None) -> bool:
        """Update each chunked parameter in groups of consecutive chunks (at least
        ``update_bytes``, default :data:`UPDATE_BYTES`) as they land, where the result is the
        same as one update after the last pull: an optimizer of :data:`ELEMENTWISE`.
        ``first_keys[i]``: the MXNet key of parameter i's first chunk. Returns
        whether any parameter is updated so."""
        self._groups, self._group_of = [], {}
        if type(self.optimizer) not in ELEMENTWISE or self.stages:
            return False
        update_bytes = UPDATE_BYTES if update_bytes is None else update_bytes
        for index, (first, bounds) in enumerate(zip(first_keys, chunks)):
            if len(bounds) < 2:
                continue
            per = max(1, update_bytes // np.dtype(self.params[index].dtype).itemsize)
            start = 0
            for j, (a, b) in enumerate(bounds):
                self._group_of[int(first) + j] = len(self._groups)
                last = j == len(bounds) - 1
                if last or b - bounds[start][0] >= per:
                    self._groups.append((index, bounds[start][0], b, j + 1 - start, last))
                    start = j + 1
        return bool(self._groups)

    @property
    def groups(self) -> List[Group]:
        return self._groups

    def begin(self) -> bool:
        """Before a step's pushes: every trained gradient checked fresh (MXNet's message
        otherwise); False where no piece is updated before the last pull."""
        if not self._groups:
            return False
        for param in self.params:
            if param.grad_req != "null":
                for weight in param.list_data():
                    if not _mx.fresh(weight):
                        raise stale(param, weight)
        self._landed = [0] * len(self._groups)
        return True

    def landed(self, key: int) -> None:
        """MXNet key ``key``'s sum was copied into the gradient: once every chunk of its group
        has, issue the group's update on every copy (MXNet's engine runs it once the copies are
        done, while later chunks still travel)."""
        group = self._group_of.get(key)
        if group is None:
            return
        self._landed[group] += 1
        index, a, b, size, last = self._groups[group]
        if self._landed[group] < size:
            return
        param, opt = self.params[index], self.optimizer
        for copy, (weight, grad) in enumerate(zip(param.list_data(), param.list_grad())):
            _mx.count_for(opt, weight.context.device_id)
            state = self._state(self.updater(copy), index, weight)
            arrays = [weight, grad] + leaves(state)
            w, g, s = self._views.get((group, copy), arrays, lambda: _cut(arrays, state, a, b))
            if last:  # the count advances once per step: with the parameter's last group
                opt.update_multi_precision(index, w, g, s)
                _mx.mark_updated(weight)
                self._done.add(index)  # so update() skips it
            else:
                with _mx.counts_kept(opt, index):
                    opt.update_multi_precision(index, w, g, s)

    @staticmethod
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

    # what a checkpoint holds

    def dump(self, arrays: dict, copy: Callable) -> dict:
        """The optimizer's state as JSON: its type, update counts, its and its scheduler's
        plain attributes (the learning rate, Nadam's momentum schedule) and a tree per state
        whose leaves are ``{"array": name}``, each array ``copy(name, array)`` put in
        ``arrays`` (every copy's states and counts are equal: the first's)."""
        def leaf(array, name: str):
            if not isinstance(array, mx.nd.NDArray):
                raise ValueError("cannot checkpoint an optimizer state of type "
                                 f"{type(array).__name__}")
            arrays[name] = copy(name, array)
            return {"array": name}
        states = {str(i): tree_map(lambda a, path: leaf(a, ".".join(map(str, (i, *path)))),
                                   s, list) for i, s in self.updater(0).states.items()}
        opt = self.optimizer
        tables = _mx.count_tables(opt)
        first = self.params[0].list_ctx()[0].device_id if self.params else 0
        return {"type": type(opt).__name__, "num_update": opt.num_update,
                "states": states, "arrays": bool(arrays),
                "update_counts": {str(i): c for i, c in tables.get(first, {}).items()},
                "attributes": _plain(opt), "scheduler": _plain(opt.lr_scheduler)}

    def problem(self, meta, arrays: dict) -> Optional[str]:
        """What keeps :meth:`load` from restoring ``meta`` and ``arrays`` into these
        parameters and this optimizer, or None."""
        try:
            if not valid_meta(meta):
                raise ValueError("its form")
            names = array_names(meta["states"])
        except ValueError:
            return "its description is damaged"
        kind, states = meta["type"], meta["states"]
        if kind != type(self.optimizer).__name__:
            return f"it holds the state of a {kind} optimizer, not {type(self.optimizer).__name__}"
        beyond = [i for i in map(int, [*states, *meta["update_counts"]])
                  if not 0 <= i < len(self.params)]
        if beyond:
            return f"it holds the state of parameter {beyond[0]}, which this trainer lacks"
        if not names <= set(arrays):
            return "an array it names is missing"
        for i in map(int, states):
            param = self.params[i]
            have = tree_map(lambda leaf, _: _kind(arrays[leaf["array"]]), states[str(i)], list)
            want = tree_map(lambda a, _: _kind(a), self.optimizer.create_state_multi_precision(
                i, param.list_data()[0]), list)
            if have != want:
                return (f"its state of parameter {i} ({param.name}) holds "
                        f"[{', '.join(leaves(have))}], where this trainer's holds "
                        f"[{', '.join(leaves(want))}]: it is another net's or setting's")
        for mine, theirs in ((self.optimizer, meta.get("attributes")),
                             (self.optimizer.lr_scheduler, meta.get("scheduler"))):
            if not isinstance(theirs or {}, dict):
                return "its description is damaged"
            odd = [k for k, v in (theirs or {}).items() if mine is not None and
                   hasattr(mine, k) and _sort(v) != _sort(getattr(mine, k))]
            if odd:
                return f"its {type(mine).__name__} {odd[0]} is {theirs[odd[0]]!r}, of another kind"
        return None

    def load(self, meta: dict, arrays: dict, settings: bool = False) -> None:
        """The state :meth:`dump` wrote, on every copy (moved to each copy's device at its next
        update), with the optimizer's momentum schedule (Nadam's); with ``settings``, also its
        and its scheduler's other attributes (the learning rate: what ``load_states`` of a
        ``gluon.Trainer`` restores). ValueError, before any change, for what does not fit."""
        wrong = self.problem(meta, arrays)
        if wrong:
            raise ValueError(wrong)
        self.restore_counts({int(i): c for i, c in meta["update_counts"].items()},
                            meta["num_update"])
        states = {int(i): tree_map(lambda leaf, _: arrays[leaf["array"]], tree, tuple)
                  for i, tree in meta["states"].items()}
        for copy in range(1 if self.stages else len(self.params[0].list_ctx())):
            updater = self.updater(copy)
            updater.states = {i: tree_map(lambda a, _: a.copy(), s) for i, s in states.items()}
            updater.states_synced = dict.fromkeys(updater.states, False)
        attributes = meta.get("attributes") or {}
        for name in (attributes if settings else STATE_ATTRIBUTES):
            if name in attributes and name != "num_update":
                setattr(self.optimizer, name, attributes[name])
        if settings and self.optimizer.lr_scheduler is not None:
            for name, value in (meta.get("scheduler") or {}).items():
                setattr(self.optimizer.lr_scheduler, name, value)

    def restore_counts(self, counts: Dict[int, int], num_update: int) -> None:
        """Every copy's update counts ``counts``; a pipeline's devices share one table."""
        devices = {c.device_id for p in self.params for c in p.list_ctx()} or {0}
        shared = dict(counts)
        _mx.set_count_tables(self.optimizer, {
            d: shared if self.stages else dict(counts) for d in sorted(devices)})
        self.optimizer.num_update = num_update


def whole(value, low: int, high: int) -> bool:
    """Whether ``value`` is an int (not a bool) from ``low`` to ``high``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def valid_meta(meta) -> bool:
    """Whether ``meta`` has the form :meth:`Updates.dump` writes: each field of the type and
    range it needs (what its state trees name is :func:`array_names`')."""
    return (isinstance(meta, dict) and isinstance(meta.get("type"), str) and
            whole(meta.get("num_update"), 0, 2 ** 62) and
            isinstance(meta.get("arrays"), bool) and
            isinstance(meta.get("states"), dict) and
            isinstance(meta.get("update_counts"), dict) and
            all(whole(c, 0, 2 ** 62) for c in meta["update_counts"].values()) and
            all(k.isdigit() for k in [*meta["states"], *meta["update_counts"]]))


def array_names(states: dict) -> set:
    """The array names the state trees of ``states`` (a valid meta's) refer to; ValueError
    for a leaf that is not ``{"array": name}``."""
    names = set()
    for leaf in (leaf for tree in states.values() for leaf in leaves(tree)):
        if not (isinstance(leaf, dict) and set(leaf) == {"array"} and
                isinstance(leaf["array"], str)):
            raise ValueError(f"an optimizer state that is not an array: {leaf!r}"[:200])
        names.add(leaf["array"])
    return names


# Attributes of an optimizer that its updates change (not settings): restored with its states
STATE_ATTRIBUTES = ("m_schedule",)  # Nadam's momentum schedule, a product over every step


def _kind(array) -> str:
    """What a state array must match: its shape and dtype."""
    return f"{tuple(array.shape)} {np.dtype(array.dtype).name}"


def _sort(value) -> str:
    """An attribute value's sort: a number (bools included), a string, None or other."""
    if isinstance(value, (bool, int, float)):
        return "number"
    return "string" if isinstance(value, str) else "none" if value is None else "other"


def _plain(obj) -> dict:
    """``obj``'s public attributes that JSON holds as they are (numbers, strings, None)."""
    if obj is None:
        return {}
    return {k: v for k, v in vars(obj).items() if not k.startswith("_") and
            (v is None or isinstance(v, (bool, int, float, str)))}


def updates_of(trainer) -> Optional[Updates]:
    """The updates of ``trainer``: make_trainer's, or any ``gluon.Trainer``'s (over its own
    updaters, as a checkpoint of a hand-written loop's trainer needs); None where the servers
    update (dist_async) and hold the optimizer's state."""
    exchange = getattr(trainer, "exchange", None)
    if exchange is not None:
        return None if exchange.servers_update else exchange.updates
    updating = _mx.kvstore_updating(trainer)
    if updating and "dist" in updating:
        return None
    if updating:
        raise ValueError(f"this gluon.Trainer updates inside its {updating!r} kvstore, whose "
                         "optimizer state a checkpoint cannot reach: make it with "
                         "update_on_kvstore=False, or with gluondist.kvstore.make_trainer")
    return Updates(_mx.trainer_params(trainer), trainer.optimizer,
                   updaters=_mx.trainer_updaters(trainer))


def _cut(arrays: list, state, a: int, b: int):
    """Views of elements ``[a, b)`` of the weight, the gradient and ``state`` (whose leaves are
    ``arrays[2:]``)."""
    cut = iter([x.reshape((-1,))[a:b] for x in arrays])
    return next(cut), next(cut), tree_map(lambda _, __: next(cut), state)
