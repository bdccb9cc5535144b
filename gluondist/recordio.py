"""Samples of raw arrays in MXNet's RecordIO (``.rec`` with its ``.idx``), for data larger
than memory: :func:`pack` makes a record of an array and its label, :class:`ArrayRecordDataset`
reads them back, one record per ``__getitem__``, as the ``(x, y)`` samples fit takes.

Images that are encoded (JPEG, PNG) need none of this: MXNet's own
``gluon.data.vision.ImageRecordDataset`` decodes them. These are for what an image codec does
not hold, float32 vectors say, or images kept undecoded for speed.
"""
from __future__ import annotations

from typing import Sequence, Tuple, Union

import numpy as np

from ._mx import mx


def pack(x: np.ndarray, label: Union[float, Sequence[float]]) -> bytes:
    """A record of ``x``'s bytes (C order, its own dtype) and ``label`` (a number, or an array
    of numbers kept as float32, MXNet's header label), for
    ``mx.recordio.MXIndexedRecordIO.write_idx``. The shape and dtype are not stored: the
    :class:`ArrayRecordDataset` that reads the file is given them."""
    label = float(label) if np.ndim(label) == 0 else np.asarray(label, dtype=np.float32)
    header = mx.recordio.IRHeader(0, label, 0, 0)
    return mx.recordio.pack(header, np.ascontiguousarray(x).tobytes())


class ArrayRecordDataset(mx.gluon.data.RecordFileDataset):
    """The records :func:`pack` wrote to ``filename`` (its ``.idx`` beside it, as for MXNet's
    ``RecordFileDataset``), each read when indexed, as ``(x, y)``: ``x`` the record's array of
    ``shape`` and ``dtype`` as float32, ``y`` its label as float32 (a number, or an array).

    Only the ``.idx`` is held in memory (MXNet's reader keeps it in a dict and a list, 100
    to 170 bytes a record: docs/recordio.md); each sample is read from the file when
    indexed. It works in a ``DataLoader`` with worker processes: MXNet's reader opens the
    file again in each."""

    def __init__(self, filename: str, shape: Sequence[int], dtype="uint8"):
        super().__init__(filename)
        self.shape, self.dtype = tuple(int(n) for n in shape), np.dtype(dtype)
        self._bytes = int(np.prod(self.shape)) * self.dtype.itemsize

    def __getitem__(self, idx: int) -> Tuple[np.ndarray, Union[np.float32, np.ndarray]]:
        header, payload = mx.recordio.unpack(super().__getitem__(idx))
        if len(payload) != self._bytes:
            raise ValueError(f"record {idx} of {self.filename} holds {len(payload)} bytes, but "
                             f"shape {self.shape} of {self.dtype} takes {self._bytes}; give the "
                             "shape and dtype it was packed with")
        x = np.frombuffer(payload, dtype=self.dtype).reshape(self.shape).astype(np.float32)
        label = header.label
        return x, (np.float32(label) if np.ndim(label) == 0 else label.astype(np.float32))
