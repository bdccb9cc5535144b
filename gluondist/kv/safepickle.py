"""The one pickle gluondist reads: the optimizer a worker sends its servers.

``kv.set_optimizer`` pickles the optimizer (protocol 0) and MXNet's server loop runs
``pickle.loads`` on it, from any peer: ps-lite authenticates no one, so a plain load would let
anyone who reaches a server's port run code as its user. gluondist's servers
(``gluondist.launcher.child.server``) load it here instead, through an unpickler whose
``find_class`` allows only what MXNet's own optimizers pickle to (the pickle module's
"Restricting Globals" recipe). The set was found by pickling every registered optimizer with
every lr_scheduler and the options users set; ``tests/unit/test_security.py`` repeats that search.
Workers run the same check before a ``dist_async`` job sends its optimizer, so a refusal is a
one-line error there rather than a dead server.
"""
from __future__ import annotations

import io
import pickle
from typing import Dict, Tuple

# Besides MXNet's classes, protocol 0 names only copyreg's reconstructor and ``object``, in
# the Python 2 spellings it writes (and the Python 3 ones). A numpy number among the settings
# would add numpy's scalar reconstructor and ``_codecs.encode``, but MXNet 1.9.1 cannot send
# such a pickle at all (it decodes it as UTF-8 and passes it as a C string, which its raw
# bytes break), so they stay out and check_sendable says what to give instead.
PLAIN_GLOBALS = frozenset({
    ("copy_reg", "_reconstructor"), ("copyreg", "_reconstructor"),
    ("__builtin__", "object"), ("builtins", "object"),
})


class Refused(pickle.UnpicklingError):
    """The pickle is not one of an MXNet optimizer: ``what`` names what it would load."""

    def __init__(self, what: str):
        # a peer chooses these names: escaped, so they cannot forge lines or reach a terminal
        what = what.encode("unicode_escape").decode("ascii")
        super().__init__(f"refused a command that would load {what}")
        self.what = what


def optimizer_classes() -> Dict[Tuple[str, str], type]:
    """MXNet's own optimizer and lr_scheduler classes by (module, name). Classes registered
    by user code (``@mx.optimizer.register`` in a training script) are left out: a server
    never imports the script, so it could not load them anyway."""
    import mxnet as mx
    optimizers = set(mx.optimizer.Optimizer.opt_registry.values())
    schedulers = {c for c in vars(mx.lr_scheduler).values()
                  if isinstance(c, type) and issubclass(c, mx.lr_scheduler.LRScheduler)}
    return {(c.__module__, c.__qualname__): c for c in optimizers | schedulers
            if c.__module__.split(".")[0] == "mxnet"}


class _OptimizerUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, classes: Dict[Tuple[str, str], type]):
        super().__init__(io.BytesIO(data))
        self._classes = classes

    def find_class(self, module, name):
        if (module, name) in self._classes:
            return self._classes[(module, name)]
        if (module, name) in PLAIN_GLOBALS:
            return super().find_class(module, name)
        raise Refused(f"{module}.{name}")


def load_optimizer(data: bytes):
    """The optimizer pickled in ``data``, or :class:`Refused` naming what is not allowed (a
    global outside the set, an object that is no optimizer, a malformed pickle)."""
    import mxnet as mx
    try:
        optimizer = _OptimizerUnpickler(data, optimizer_classes()).load()
    except Refused:
        raise
    except Exception as exc:  # a malformed or truncated pickle: refused, not a crash
        raise Refused(f"a malformed pickle ({exc})") from exc
    if not isinstance(optimizer, mx.optimizer.Optimizer):
        raise Refused(f"a {type(optimizer).__name__}, which is not an optimizer")
    for path, value in _state(optimizer, "optimizer"):
        if not isinstance(value, PLAIN_VALUES):
            raise Refused(f"an optimizer whose {path} is a {type(value).__name__}")
    return optimizer


# What an optimizer's and its lr_scheduler's attributes hold: numbers, strings and containers
# of them. Anything else (an allowed class put where a number or a method belongs) would make
# the server's updates silently wrong, so it is refused too.
PLAIN_VALUES = (bool, int, float, str, bytes, type(None))


def _state(obj, path: str, top: bool = True):
    """``(path, value)`` for every leaf of an optimizer's state: its attributes, its
    ``lr_scheduler``'s (the one place an object may stand), and what their dicts, lists and
    tuples hold. An attribute that would hide a method of its class is a leaf that is never
    plain."""
    import mxnet as mx
    if top:
        for name, value in vars(obj).items():
            where = f"{path}.{name}"
            if callable(getattr(type(obj), name, None)):
                yield f"{where} (in place of a method)", value
            elif name == "lr_scheduler" and isinstance(value, mx.lr_scheduler.LRScheduler) \
                    and isinstance(obj, mx.optimizer.Optimizer):
                yield from _state(value, where)
            else:
                yield from _state(value, where, top=False)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _state(key, f"{path} key", top=False)
            yield from _state(value, f"{path}[{key!r}]", top=False)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(obj):
            yield from _state(value, f"{path}[{i}]", top=False)
    else:
        yield path, obj


def check_sendable(optimizer) -> None:
    """Raise ``ValueError`` unless gluondist's servers would load ``optimizer``: what a
    worker checks before ``set_optimizer`` sends it (``dist_async``)."""
    import numpy as np
    numbers = [p for p, v in _state(optimizer, "optimizer") if isinstance(v, np.generic)]
    if numbers:
        raise _not_sendable(f"numpy numbers ({', '.join(numbers)})",
                            "give Python numbers (float(x)), or use dist_sync")
    try:
        load_optimizer(pickle.dumps(optimizer, 0))  # protocol 0, as kv.set_optimizer sends
    except Refused as exc:
        raise _not_sendable(exc.what) from exc
    except (pickle.PicklingError, TypeError, AttributeError) as exc:  # a lambda, a lock ...
        raise _not_sendable(f"what cannot be pickled ({exc})") from exc


def _not_sendable(what: str, fix: str = "use a built-in one, or dist_sync") -> ValueError:
    return ValueError(
        "dist_async sends the optimizer to the servers, which load only MXNet's built-in "
        f"optimizers and lr_schedulers holding plain settings, not {what}: {fix} (dist_sync "
        "updates on the workers and sends the servers nothing)")
