"""Gradients compressed on the wire (``compression=`` of fit and make_trainer): what each kind
means, its checks, and the exact allreduce that still works once MXNet's 2-bit is on.

``"fp16"``: each worker scales its gradient by 1/W (W workers), casts it to float16 and pushes
it on a float16 key of its own; the servers sum the W halves *in float16* (MXNet's server adds
two float16 arrays through float32 and rounds the result to float16 once per addition) and the
workers pull the float16 sum, cast it back and multiply by W. Parameters, optimizer state and
the initial broadcast stay float32. The 1/W scale keeps the sum, and every partial sum on the
servers, within the largest worker's gradient element: nothing overflows while every worker's
gradient elements (Gluon's are sums over the worker's batch) stay within 65504, float16's
largest. Beyond that an element may overflow (beyond 65504 x W it does, in the cast), and the
infinity it makes is refused in one line by the step after the pull (:func:`check_finite`). MXNet's
servers can sum float16 pushes in float32 (``kSetMultiPrecision``), but that mode converts every
key that is not float32 to a float32 copy, gluondist's float64 allreduce keys included: a sum of
``1 + 2**-40`` over two workers came back as 2.0. So the sum stays float16.

``"2bit"``: MXNet's own (``kv.set_gradient_compression``): each worker adds its gradient to a
residual, pushes ``+threshold``, ``-threshold`` or 0 per element (16 to a float) and keeps the
rest as the residual; pulls are whole float32. MXNet sets it for the process's one kvstore for
good (there is no type to set it back, and every push is compressed from then on, of float32
only, never through pushpull), so once a trainer uses it every later trainer of the process
must use the same, and :func:`allreduce_bits` keeps allreduce exact through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

FP16_MAX = 65504.0  # float16's largest finite value
DEFAULT_THRESHOLD = 0.5  # MXNet's, for "2bit" given without one
KINDS = ("fp16", "2bit")


@dataclass(frozen=True)
class Compression:
    """A checked ``compression=`` value: ``kind`` is ``"fp16"`` or ``"2bit"``."""

    kind: str
    threshold: Optional[float] = None  # 2bit's

    @property
    def code(self) -> float:
        """One number per setting, for the workers' check that they agree (None: 0)."""
        return 1.0 if self.kind == "fp16" else 2.0 + self.threshold

    def mxnet_params(self) -> dict:
        """What ``kv.set_gradient_compression`` takes (2bit)."""
        return {"type": "2bit", "threshold": self.threshold}

    def __str__(self) -> str:
        return "fp16" if self.kind == "fp16" else f"2bit (threshold {self.threshold})"


def parse(value, name: str = "compression") -> Optional[Compression]:
    """``None``, ``"fp16"``, ``"2bit"`` (threshold 0.5) or ``{"type": ..., "threshold": t}``,
    checked; raises ValueError in one line naming what was wrong."""
    if value is None or isinstance(value, Compression):
        return value
    given = value
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict) or value.get("type") not in KINDS:
        raise ValueError(f"{name} must be None, 'fp16', '2bit' or {{'type': '2bit', "
                         f"'threshold': T}}, not {given!r}")
    unknown = sorted(set(value) - ({"type", "threshold"} if value["type"] == "2bit"
                                   else {"type"}))
    if unknown:
        raise ValueError(f"{name} {value!r}: unknown key(s) {unknown} for {value['type']!r}")
    if value["type"] == "fp16":
        return Compression("fp16")
    t = value.get("threshold", DEFAULT_THRESHOLD)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t) or t <= 0:
        raise ValueError(f"{name}: 2bit's threshold must be a positive number, not {t!r}")
    return Compression("2bit", float(t))


def check_mode(compression: Optional[Compression], mode, name: str = "compression") -> None:
    """Refuse, in one line, a compression the kvstore ``mode`` cannot use."""
    if compression is None:
        return
    if mode is None or not mode.distributed:
        raise ValueError(f"{name}={compression.kind!r} compresses what crosses the network to "
                         f"the servers; kvstore {mode or 'none'!r} sends nothing there: drop "
                         f"{name} or train in a `gluondist launch` job (dist_sync)")
    if mode.updates_on_servers:
        why = ("the servers would keep float16 weights and optimizer state"
               if compression.kind == "fp16" else
               "its step is one pushpull, which MXNet refuses under 2-bit (\"Compression not "
               "supported with PushPull\")")
        raise ValueError(f"{name}={compression.kind!r} with dist_async: {why}; use "
                         "--kvstore dist_sync or compression=None")


def check_same(current: Optional[Compression], wanted: Optional[Compression]) -> None:
    """A trainer's compression against the 2-bit one this process's kvstore already has."""
    if current is not None and wanted != current:
        raise ValueError(f"this process's kvstore compresses every push with {current} since an "
                         "earlier trainer, and MXNet cannot turn that off: give the same "
                         f"compression, or train with {wanted or 'None'} in a new process")


def check_finite(sums: List, workers: int) -> None:
    """After an fp16 pull: ``sums`` are each pulled gradient's sum of elements (NDArrays)."""
    if not sums:
        return
    import mxnet as mx
    top = float(mx.nd.sum(mx.nd.concat(*[m.reshape((1,)) for m in sums], dim=0)).asscalar())
    if not np.isfinite(top):
        raise FloatingPointError(
            f"compression='fp16' overflowed: a gradient element (a sum over a worker's batch) "
            f"went past float16's range (safe up to {FP16_MAX:g} on every one of the {workers} "
            "workers); use a smaller batch_size or loss scale, or compression=None")


def encode_bits(values: np.ndarray, rank: int, workers: int, threshold: float) -> np.ndarray:
    """float64 ``values`` as float32 elements that MXNet's 2-bit sends exactly: every bit of
    every value is ``threshold`` or 0 (a residual then stays 0), in this rank's row of a table
    with a row per worker; the servers' sum of the tables is every worker's bits."""
    bits = np.unpackbits(np.ascontiguousarray(values, dtype="<f8").view(np.uint8))
    table = np.zeros((workers, bits.size), dtype=np.float32)
    table[rank] = bits * np.float32(threshold)
    return table.ravel()


def decode_bits(summed: np.ndarray, n: int, workers: int, threshold: float) -> np.ndarray:
    """The sum, added in rank order, of the ``n`` float64 values each worker encoded."""
    counts = np.rint(summed[:workers * n * 64] / threshold).astype(np.uint8)
    rows = np.packbits(counts.reshape(workers, n * 64), axis=1).view("<f8")
    total = rows[0].copy()
    for row in rows[1:]:
        total += row
    return total


class HalfWire:
    """The float16 wire of one trainer's gradients (see the module's docstring), for
    kv/trainer.py's pushpull: each MXNet key k of the trainer's gradients travels on float16
    key k + ``count``, cast into a staging array; the sum is cast back into the gradient."""

    def __init__(self, workers: int, count: int):
        self.workers, self.count = workers, count
        self.sums: List = []  # each pulled sum's check value, until check() reads them
        self._pushed: set = set()  # the keys pushed since check() last ran

    def init(self, kv, keys: List[int], sizes: List[int]) -> None:
        """Register the float16 keys (every worker together, as kv.init)."""
        import mxnet as mx
        kv.init(list(keys), [mx.nd.zeros((n,), dtype="float16") for n in sizes])

    def begin(self, keys: List[int]) -> None:
        """A key pushed again: a new step, and the previous one's sums were not read (a
        hand-written loop's trainer.step calls no check()): read now, before this push, so
        they neither pile up nor go unread. (Within a step Trainer pushes key after key, and
        reading a sum there would make the next key's push wait for this key's pull.)"""
        if self._pushed.intersection(keys):
            self.check()
        self._pushed.update(keys)

    def key(self, key: int) -> int:
        return key + self.count

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
        sums, self.sums, self._pushed = self.sums, [], set()
        check_finite(sums, self.workers)
