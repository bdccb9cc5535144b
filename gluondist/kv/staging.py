"""The arrays a trainer's chunks travel through on their way to the servers and back (see
:class:`Staging`), for :mod:`gluondist.kv.trainer` and the wire formats of
:mod:`gluondist.kv.compression`."""
from __future__ import annotations

import numpy as np

from .._mx import mx


class Staging:
    """The arrays a trainer's chunks travel through, which also bound how many are on the
    wire (CHUNKS_IN_FLIGHT). MXNet's engine orders operations per array, and a view counts as
    its whole array: the chunks of one gradient, sent as views of it, would each wait for all
    of them to be pushed before any pull. So each chunk is copied into a staging array, one
    per device, and pulled back through it.

    With ``slots`` > 0, chunks take the slots in turn (views of arrays of ``elements``
    elements, made once); the trainer copies chunk i + slots in only after chunk i's sum was
    copied out, so at most ``slots`` chunks are in flight. With 0, and for an array that is
    not a chunk (fp16 casts every gradient), a key has an array of its own."""

    def __init__(self, slots: int, elements: int):
        self.slots, self.elements = slots, elements
        self._turn = 0
        self._arrays: dict = {}  # (slot, device, context, dtype) -> the slot's array
        self._views: dict = {}  # (slot, MXNet key, dtype) -> views of them for that key

    def take(self, key: int, like, dtype=None, chunk: bool = True) -> list:
        """Staging views for MXNet key ``key``'s arrays ``like`` (one per device), shaped as
        they are, of ``dtype`` (default theirs); in the next slot if ``chunk``."""
        slot = ("key", key)
        if chunk and self.slots:
            slot, self._turn = self._turn % self.slots, self._turn + 1
        views = self._views.get((slot, key, dtype))  # made once: slicing costs more than a copy
        if views is None:
            views = self._views[slot, key, dtype] = [
                self._array(slot, device, array, dtype)[:array.size].reshape(array.shape)
                for device, array in enumerate(like)]
        return views

    def _array(self, slot, device: int, like, dtype) -> "mx.nd.NDArray":
        name = (slot, device, like.context, np.dtype(dtype or like.dtype))
        made = self._arrays.get(name)
        if made is None:
            size = self.elements if isinstance(slot, int) else like.size
            made = self._arrays[name] = mx.nd.empty((size,), like.context, name[3])
        return made
