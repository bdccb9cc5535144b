"""MXNet calls a trainer makes on the same arrays every step, their C arguments built once.

MXNet 1.9.1's Python builds a call's C arguments anew each time: ``NDArray.copyto`` the arrays
of handles, a check of each array's type and the operator's keyword strings, and
``KVStore.pushpull`` the arrays of keys and handles. That costs more than the call: at 64 KiB
chunks a worker spent 6.7 ms of Python a step issuing a net's 130 chunks (128 of them an 8 MB
layer's; two copies and a pushpull each) through them, 4.4 ms this way
(benchmarks/issue_cost.py), and in a job the workers do it all at once, beside their backward
passes, on the hosts' cores. The trainer passes the same gradients and staging arrays every
step, so each pair of arrays gets a :class:`Copy` and each key and array a :class:`PushPull`
once, and a step makes only the C calls."""
from __future__ import annotations

import ctypes
from array import array

from .._mx import mx

_LIB, check_call = mx.base._LIB, mx.base.check_call
_COPYTO = ctypes.c_void_p()  # MXNet's _copyto operator, what NDArray.copyto runs
check_call(_LIB.NNGetOpHandle(mx.base.c_str("_copyto"), ctypes.byref(_COPYTO)))


class Copy:
    """``src.copyto(dst)``, issued to MXNet's engine each time it is called."""

    __slots__ = ("src", "dst", "_inputs", "_outputs", "_count", "_stypes")

    def __init__(self, src, dst):
        self.src, self.dst = src, dst  # kept: the handles below are theirs
        self._inputs = mx.base.c_handle_array([src])
        self._outputs = ctypes.cast(mx.base.c_handle_array([dst]),
                                    ctypes.POINTER(mx.base.NDArrayHandle))
        self._count = ctypes.c_int(1)
        self._stypes = ctypes.POINTER(ctypes.c_int)()

    def __call__(self) -> None:
        check_call(_LIB.MXImperativeInvokeEx(
            _COPYTO, 1, self._inputs, ctypes.byref(self._count),
            ctypes.byref(self._outputs), 0, None, None, ctypes.byref(self._stypes)))


class PushPull:
    """``kv.pushpull(key, values, out=values)`` for one integer key and its arrays (one per
    device)."""

    __slots__ = ("kv", "values", "_keys", "_handles", "_count")

    def __init__(self, kv, key: int, values):
        self.kv, self.values = kv, list(values)
        self._count = mx.base.mx_uint(len(self.values))
        self._keys = mx.base.c_array_buf(ctypes.c_int, array("i", [key] * len(self.values)))
        self._handles = mx.base.c_handle_array(self.values)

    def __call__(self, priority: int) -> None:
        check_call(_LIB.MXKVStorePushPull(self.kv.handle, self._count, self._keys, self._count,
                                          self._keys, self._handles, self._handles,
                                          ctypes.c_int(priority)))


class Prepared:
    """Each call made once per step on the same arrays, kept under a name of the caller's,
    such as (MXNet key, staging array), and made again when its arrays change."""

    def __init__(self):
        self._calls: dict = {}

    def copy(self, name, src, dst) -> None:
        call = self._calls.get(name)
        if call is None or call.src is not src or call.dst is not dst:
            call = self._calls[name] = Copy(src, dst)
        call()

    def pushpull(self, name, kv, key: int, values, priority: int) -> None:
        call = self._calls.get(name)
        if call is None or call.kv is not kv or len(call.values) != len(values) or \
                any(a is not b for a, b in zip(call.values, values)):
            call = self._calls[name] = PushPull(kv, key, values)
        call(priority)
