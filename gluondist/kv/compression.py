"""Gradients compressed on the wire (``compression=`` of fit and make_trainer). A wire format is
one class, a :class:`Compression`, found by its name in a registry (:func:`register` adds one,
:func:`lookup` finds it): its keys, what it pushes and what it makes of the pulled sum, its
set-up of MXNet's kvstore, its checks and its description. The trainer, the process's kvstore
state, the bench's cost model and the CLI ask it; none compares names. Here too: the exact
allreduce that still works once MXNet's 2-bit is on.

``None`` (or ``"none"``): float32, :class:`Compression` itself.

``"fp16"``: each worker scales its gradient by 1/W (W workers), casts it to float16 and pushes
it on a float16 key of its own; the servers sum the W halves *in float16* (MXNet's server adds
two float16 arrays through float32 and rounds the result to float16 once per addition) and the
workers pull the float16 sum, cast it back and multiply by W. Parameters, optimizer state and
the initial broadcast stay float32. The 1/W scale keeps the sum, and every partial sum on the
servers, within the largest worker's gradient element: nothing overflows while every worker's
gradient elements (Gluon's are sums over the worker's batch) stay within 65504, float16's
largest. Beyond that an element may overflow (beyond 65504 x W it does, in the cast), and the
infinity it makes is refused in one line by the step after the pull (:meth:`FP16.check`). MXNet's
servers can sum float16 pushes in float32 (``kSetMultiPrecision``), but that mode converts every
key that is not float32 to a float32 copy, gluondist's float64 allreduce keys included: a sum of
``1 + 2**-40`` over two workers came back as 2.0. So the sum stays float16.

``"2bit"``: MXNet's own (``kv.set_gradient_compression``): each worker adds its gradient to a
residual, pushes ``+threshold``, ``-threshold`` or 0 per element (16 to a float) and keeps the
rest as the residual; pulls are whole float32. MXNet sets it for the process's one kvstore for
good (there is no type to set it back, and every push is compressed from then on, of float32
only, never through pushpull), so once a trainer uses it every later trainer of the process
must use the same, and :func:`encode_bits` keeps allreduce exact through it.

Standard library only at import (the CLI lists the formats): numpy and MXNet are imported
where they are used.
"""
from __future__ import annotations

import copy
import math
import zlib
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Type

from ..trees import Kept

if TYPE_CHECKING:
    import mxnet

FP16_MAX = 65504.0  # float16's largest finite value
DEFAULT_THRESHOLD = 0.5  # MXNet's, for "2bit" given without one


class Compression:
    """A wire format: how one trainer's gradients cross the network to the servers and back.

    This class itself is float32 (``compression=None``): a chunk is copied into its staging
    arrays and its sum copied back out, a gradient sent whole goes as it is. A format subclasses
    it, overrides what differs, and is made known by :func:`register`; the trainer makes one
    instance per trainer (:meth:`bind`), so state between calls lives on the instance.

    Per trainer, every step, for each MXNet key ``k`` of its gradients (a whole gradient, or a
    chunk of one): :meth:`begin` with the step's keys, then ``bufs = stage(k, parts, staging,
    chunk)`` (``parts``: the gradient's arrays, one per device), a pushpull of ``bufs`` on key
    :meth:`key` ``(k)``, and :meth:`land` ``(bufs, out)`` into the gradient; :meth:`check` once
    the step's pulls are in."""

    name = "none"  # what compression= takes
    description = "float32, as MXNet sends it"  # for help texts
    settings: Tuple[str, ...] = ()  # the keys of the dict form besides "type"
    push_bytes, pull_bytes = 4.0, 4.0  # per float32 gradient element (the bench's cost model)
    key_factor = 1  # kvstore keys per gradient key: 2 to push on keys of its own after them
    whole_as_is = True  # a gradient sent whole is pushed as it is, not staged
    # a landed sum is final, so the optimizer may update its chunk before the step's check
    final_on_landing = True
    kvstore_wide = False  # setup() changes the process's one kvstore for good (MXNet's 2-bit)
    async_why = "the servers apply each push as it comes, past the wire's decoding"

    def __init__(self):
        self.workers, self.count = 1, 0

    @classmethod
    def checked(cls, settings: dict, name: str = "compression") -> "Compression":
        """The format for the dict form's ``settings`` (without ``"type"``), checked; raise
        ValueError in one line naming what was wrong."""
        return cls(**settings)

    def values(self) -> tuple:
        """The settings' values, in the order of ``settings``."""
        return tuple(getattr(self, s) for s in self.settings)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.values() == self.values()

    def __hash__(self) -> int:
        return hash((type(self), self.values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.values()))})"

    def __str__(self) -> str:
        extra = ", ".join(f"{s} {v}" for s, v in zip(self.settings, self.values()))
        return f"{self.name} ({extra})" if extra else self.name

    @property
    def code(self) -> float:
        """One number per setting, for the workers' check that they agree (None: 0)."""
        return float(zlib.crc32(repr((self.name, self.values())).encode()) or 1)

    # checks, and the process's kvstore

    def check_mode(self, mode, name: str = "compression") -> None:
        """Refuse, in one line, a kvstore ``mode`` (a :class:`~gluondist.kv.kinds.Mode` or
        None) that cannot use this format: one with nothing to send, or dist_async."""
        if mode is None or not mode.distributed:
            raise ValueError(f"{name}={self.name!r} compresses what crosses the network to "
                             f"the servers; kvstore {mode or 'none'!r} sends nothing there: drop "
                             f"{name} or train in a `gluondist launch` job (dist_sync)")
        if mode.updates_on_servers:
            raise ValueError(f"{name}={self.name!r} with dist_async: {self.async_why}; use "
                             "--kvstore dist_sync or compression=None")

    def check_params(self, params: Sequence) -> None:
        """Refuse, in one line, parameters this format cannot send the gradients of."""

    def setup(self, kv) -> None:
        """Set up the process's distributed kvstore ``kv`` (``kvstore_wide`` formats), before
        the first trainer using it makes its keys."""

    def allreduce(self, values, rank: int, workers: int, sum_float32, limit: int):
        """(``kvstore_wide`` formats) the exact sum of float64 ``values`` over the workers,
        through ``sum_float32`` (this worker's float32 vector of at most ``limit`` elements in,
        the workers' sum out), which the format compresses like every push: what
        gluondist.kvstore.allreduce runs once the format is set."""
        raise NotImplementedError(f"compression {self.name!r} changes every push of the "
                                  "kvstore, so it must define allreduce()")

    # one trainer's wire

    def bind(self, workers: int, count: int) -> "Compression":
        """This format's wire for one trainer of ``count`` MXNet keys in a job of ``workers``."""
        wire = copy.copy(self)
        wire.workers, wire.count = workers, count
        wire.__dict__.pop("_kept", None)  # a trainer's own
        return wire

    def key(self, key: int) -> int:
        """The MXNet key the staged ``key`` travels on: its own, or (``key_factor`` 2) the
        format's key after the trainer's ``count`` float32 keys."""
        return key + (self.key_factor - 1) * self.count

    def start(self, kv, keys: List[int], sizes: List[int]) -> None:
        """Register the format's own keys ``keys`` of ``sizes`` elements (every worker
        together, as kv.init), once, before the first step."""

    def begin(self, keys: List[int]) -> None:
        """The MXNet keys of the trainer's pushpull call about to start."""

    def stage(self, key: int, parts, staging, chunk: bool) -> list:
        """What is pushed for ``key``: ``parts`` (one array per device) copied into their
        staging arrays (``staging.take``; in the next slot if ``chunk``)."""
        bufs = staging.take(key, parts, chunk=chunk)
        for part, buf in zip(parts, bufs):
            self.copy(("in", id(buf)), part, buf)
        return bufs

    def land(self, bufs, out) -> None:
        """The pulled sum in ``bufs`` into ``out`` (one array per device, or one array)."""
        for buf, target in zip(bufs, out if isinstance(out, (list, tuple)) else [out]):
            self.copy(("out", id(buf)), buf, target)

    def copy(self, name, src: "mxnet.nd.NDArray", dst: "mxnet.nd.NDArray") -> None:
        """``src.copyto(dst)``, its C call prepared once under ``name`` (see gluondist._mx.Copy),
        kept by this trainer's wire."""
        kept = self.__dict__.get("_kept")
        if kept is None:
            kept = self.__dict__["_kept"] = Kept()
        kept.get(name, (src, dst), lambda: _copy(src, dst))()

    def check(self) -> None:
        """After a step's pulls (the trainer's check_compression)."""


def _copy(src, dst):
    from .._mx import Copy  # loads MXNet: here, as the launcher imports this module
    return Copy(src, dst)


FLOAT32 = Compression()  # the wire of compression=None
REGISTRY: Dict[str, Type[Compression]] = {}


def register(cls: Type[Compression]) -> Type[Compression]:
    """Make the wire format ``cls`` (a :class:`Compression` subclass) known to fit's and
    make_trainer's ``compression=`` by its ``name``; returns ``cls`` (a class decorator). Every
    worker of a job must register the same formats. Raises ValueError for a name taken by
    another class."""
    if not (isinstance(cls, type) and issubclass(cls, Compression)):
        raise ValueError(f"register takes a subclass of Compression, not {cls!r}")
    if not isinstance(cls.name, str) or not cls.name:
        raise ValueError(f"{cls.__name__}.name must be a non-empty string, not {cls.name!r}")
    taken = REGISTRY.get(cls.name)
    if taken is not None and taken is not cls:
        raise ValueError(f"compression {cls.name!r} is {taken.__name__} already; give "
                         f"{cls.__name__} another name")
    REGISTRY[cls.name] = cls
    return cls


def lookup(name: str) -> Type[Compression]:
    """The wire format registered as ``name`` (``"none"``: float32); ValueError if none is."""
    if name not in REGISTRY:
        raise ValueError(f"unknown compression {name!r}; use one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def _forms() -> str:
    """What compression= takes, as a sentence's list."""
    kinds = [c for n, c in REGISTRY.items() if n != "none"]
    forms = ["None"] + [repr(c.name) for c in kinds] + [
        "{" + ", ".join([f"'type': '{c.name}'"] + [f"'{s}': {s[0].upper()}" for s in c.settings])
        + "}" for c in kinds if c.settings]
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def parse(value, name: str = "compression") -> Optional[Compression]:
    """``None`` (or ``"none"``), a registered format's name, or ``{"type": name, setting:
    value}`` (``{"type": "2bit", "threshold": t}``), checked: the format, None for float32.
    Raises ValueError in one line naming what was wrong."""
    if isinstance(value, Compression):
        return None if type(value) is Compression else value
    given = value
    if value is None or isinstance(value, str):
        value = {"type": value or "none"}
    if not isinstance(value, dict) or not isinstance(value.get("type"), str) or \
            value["type"] not in REGISTRY:
        raise ValueError(f"{name} must be {_forms()}, not {given!r}")
    cls = REGISTRY[value["type"]]
    unknown = sorted(set(value) - {"type", *cls.settings})
    if unknown:
        raise ValueError(f"{name} {value!r}: unknown key(s) {unknown} for {value['type']!r}")
    if cls is Compression:
        return None
    return cls.checked({k: v for k, v in value.items() if k != "type"}, name)


def check_mode(compression: Optional[Compression], mode, name: str = "compression") -> None:
    """Refuse, in one line, a compression the kvstore ``mode`` cannot use."""
    if compression is not None:
        compression.check_mode(mode, name)


def check_same(current: Optional[Compression], wanted: Optional[Compression]) -> None:
    """A trainer's compression against the kvstore-wide one this process's kvstore already
    has."""
    if current is not None and wanted != current:
        raise ValueError(f"this process's kvstore compresses every push with {current} since an "
                         "earlier trainer, and MXNet cannot turn that off: give the same "
                         f"compression, or train with {wanted or 'None'} in a new process")


def encode_bits(values, rank: int, workers: int, threshold: float):
    """float64 ``values`` as float32 elements that MXNet's 2-bit sends exactly: every bit of
    every value is ``threshold`` or 0 (a residual then stays 0), in this rank's row of a table
    with a row per worker; the servers' sum of the tables is every worker's bits."""
    import numpy as np
    bits = np.unpackbits(np.ascontiguousarray(values, dtype="<f8").view(np.uint8))
    table = np.zeros((workers, bits.size), dtype=np.float32)
    table[rank] = bits * np.float32(threshold)
    return table.ravel()


def decode_bits(summed, n: int, workers: int, threshold: float):
    """The sum, added in rank order, of the ``n`` float64 values each worker encoded."""
    import numpy as np
    counts = np.rint(summed[:workers * n * 64] / threshold).astype(np.uint8)
    rows = np.packbits(counts.reshape(workers, n * 64), axis=1).view("<f8")
    total = rows[0].copy()
    for row in rows[1:]:
        total += row
    return total


def _float32_only(params: Sequence, why: str) -> None:
    """Refuse, in one line, the first parameter that is not float32."""
    import numpy as np
    other = [p for p in params if np.dtype(p.dtype) != np.float32]
    if other:
        raise ValueError(f"{why}, and parameter {other[0].name} is "
                         f"{np.dtype(other[0].dtype).name}: cast the net to float32 "
                         "(net.cast('float32')), or use compression=None")


class FP16(Compression):
    """``"fp16"`` (see the module's docstring): each MXNet key k of the trainer's gradients
    travels on float16 key k + ``count``, cast into a staging array; the sum is cast back into
    the gradient, and checked for an overflow after the step."""

    name = "fp16"
    description = "half the bytes both ways"
    push_bytes, pull_bytes = 2.0, 2.0
    key_factor = 2  # float16 gradient keys after the float32 ones that broadcast the parameters
    whole_as_is = False  # every gradient is cast
    final_on_landing = False  # check() may yet refuse the step (an overflow)
    async_why = "the servers would keep float16 weights and optimizer state"

    def __init__(self):
        super().__init__()
        self.sums: List = []  # each pulled sum's check value, until check() reads them
        self._pushed: set = set()  # the keys pushed since check() last ran

    def bind(self, workers: int, count: int) -> "FP16":
        wire = super().bind(workers, count)
        wire.sums, wire._pushed = [], set()
        return wire

    def check_params(self, params: Sequence) -> None:
        _float32_only(params, "compression='fp16' sends float32 gradients as float16")

    def start(self, kv, keys: List[int], sizes: List[int]) -> None:
        import mxnet as mx
        kv.init(list(keys), [mx.nd.zeros((n,), dtype="float16") for n in sizes])

    def begin(self, keys: List[int]) -> None:
        """A key pushed again: a new step, and the previous one's sums were not read (a loop
        of allreduce_grads and update calls no check()): read now, before this push, so they
        neither pile up nor go unread. (Within a step the exchange pushes key after key, and
        reading a sum there would make the next key's push wait for this key's pull.)"""
        if self._pushed.intersection(keys):
            self.check()
        self._pushed.update(keys)

    def stage(self, key: int, parts, staging, chunk: bool) -> list:
        """The sum of ``parts`` (one per device), scaled by 1/W in place (the trainer pulls
        into the arrays it pushes) and cast into a float16 staging array."""
        import mxnet as mx
        total = parts[0] if len(parts) == 1 else \
            mx.nd.add_n(*[p.as_in_context(parts[0].context) for p in parts])
        flat = total.reshape((-1,))
        buf = staging.take(self.key(key), [flat], "float16", chunk)[0]
        # in place: a scaled copy took twice as long as the cast (a new array each step)
        total *= 1.0 / self.workers
        mx.nd.Cast(flat, dtype="float16", out=buf)
        return [buf]

    def land(self, bufs, out) -> None:
        """The pulled float16 sum, cast into ``out`` (one array per device) and scaled back."""
        import mxnet as mx
        targets = out if isinstance(out, (list, tuple)) else [out]
        for target in targets:
            mx.nd.Cast(bufs[0].as_in_context(target.context).reshape(target.shape),
                       dtype="float32", out=target)
            target *= self.workers
        # an overflow left an infinity (or NaN) in the sum, and so in this float32 dot
        # product of it with itself (finite elements cannot overflow it: 2**31 of them at
        # most, each square below (65504 W)**2); BLAS's dot takes a tenth of the time of
        # MXNet's sum, a fiftieth of its reductions on float16
        flat = targets[0].reshape((-1,))
        self.sums.append(mx.nd.dot(flat, flat))

    def check(self) -> None:
        """The pulled sums since the last check: an overflow is refused in one line."""
        sums, self.sums, self._pushed = self.sums, [], set()
        if not sums:
            return
        import mxnet as mx
        top = float(mx.nd.sum(mx.nd.concat(*[m.reshape((1,)) for m in sums], dim=0)).asscalar())
        if not math.isfinite(top):
            raise FloatingPointError(
                f"compression='fp16' overflowed: a gradient element (a sum over a worker's "
                f"batch) went past float16's range (safe up to {FP16_MAX:g} on every one of "
                f"the {self.workers} workers); use a smaller batch_size or loss scale, or "
                "compression=None")


class TwoBit(Compression):
    """``"2bit"`` (see the module's docstring): MXNet's own, set on the process's kvstore for
    good; the trainer's wire is float32's, and MXNet compresses every push."""

    name = "2bit"
    description = "MXNet's, pushes 16x smaller"
    settings = ("threshold",)
    push_bytes, pull_bytes = 0.25, 4.0  # 16 elements to a float32 pushed; pulls whole
    kvstore_wide = True
    async_why = ("its step is one pushpull, which MXNet refuses under 2-bit (\"Compression not "
                 "supported with PushPull\")")

    def __init__(self, threshold: float = DEFAULT_THRESHOLD):
        super().__init__()
        self.threshold = threshold

    def check_params(self, params: Sequence) -> None:
        # MXNet checks each push, the first broadcast's too, inside its kvstore
        _float32_only(params, "compression='2bit' is MXNet's for float32 arrays only")

    @classmethod
    def checked(cls, settings: dict, name: str = "compression") -> "TwoBit":
        t = settings.get("threshold", DEFAULT_THRESHOLD)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or \
                t <= 0:
            raise ValueError(f"{name}: 2bit's threshold must be a positive number, not {t!r}")
        return cls(float(t))

    def allreduce(self, values, rank: int, workers: int, sum_float32, limit: int):
        """The exact sum of float64 ``values`` over the workers through a kvstore that sends
        every push in 2 bits: each worker's bits (:func:`encode_bits`; the threshold and 0 travel
        exactly), summed by ``sum_float32`` (this worker's float32 vector in, the workers' sum
        out, at most ``limit`` elements), then added up by each worker itself, in rank order."""
        if 64 * workers * len(values) > limit:
            raise ValueError(f"allreduce of {len(values)} values under 2bit compression: at "
                             f"most {limit // (64 * workers)} fit its keys")
        summed = sum_float32(encode_bits(values, rank, workers, self.threshold))
        return decode_bits(summed, len(values), workers, self.threshold)

    def mxnet_params(self) -> dict:
        """What ``kv.set_gradient_compression`` takes."""
        return {"type": "2bit", "threshold": self.threshold}

    def setup(self, kv) -> None:
        kv.set_gradient_compression(self.mxnet_params())


for _cls in (Compression, FP16, TwoBit):
    register(_cls)
