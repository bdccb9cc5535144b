"""Turn what a user passes as training or validation data into batches on devices."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ._mx import mx
from .parallel import split


class Source:
    """Indexable samples: ``len(source)``, ``source.labels`` (an array, or None when only a
    pass over the data would tell) and ``source.load(indices, ctxs)`` returning per-context
    ``(data_parts, label_parts)``."""

    def __init__(self, X=None, y=None, dataset=None, batchify_fn=None):
        self.X, self.y, self.dataset = X, y, dataset
        self.batchify_fn = batchify_fn or mx.gluon.data.dataloader.default_batchify_fn
        self.labels = y if y is not None else _array_dataset_labels(dataset)

    def __len__(self) -> int:
        return len(self.X) if self.X is not None else len(self.dataset)

    def load(self, idx: np.ndarray, ctxs: Sequence["mx.Context"]) -> Tuple[List, List]:
        if self.X is not None:
            return split(self.X[idx], ctxs), split(self.y[idx], ctxs)
        data, label = self.batchify_fn([self.dataset[int(i)] for i in idx])
        if not np.issubdtype(np.dtype(data.dtype), np.floating):
            data = data.astype(np.float32)  # as for arrays: nets compute in floats
        return split(data, ctxs), split(label, ctxs)


def _array_dataset_labels(dataset) -> Optional[np.ndarray]:
    if isinstance(dataset, mx.gluon.data.ArrayDataset) and len(dataset._data) == 2:
        labels = dataset._data[1]
        return labels.asnumpy() if isinstance(labels, mx.nd.NDArray) else np.asarray(labels)
    return None


def _as_numpy(array, name: str) -> np.ndarray:
    """``array`` as float32 numpy (integers and float64 included: MXNet computes in float32),
    refusing NaN and infinities, which would train a broken model without a word."""
    if isinstance(array, mx.nd.NDArray):
        array = array.asnumpy()
    try:
        array = np.asarray(array)
        if array.dtype != np.float32:
            array = array.astype(np.float32)
    except Exception as exc:  # ragged lists, strings and the like
        raise ValueError(f"{name} cannot be read as an array of numbers: {exc}") from exc
    check_finite(array, name)
    return array


def check_finite(array: np.ndarray, name: str) -> None:
    """Raise ValueError naming the first row of ``array`` with a NaN or infinity."""
    if array.size and not np.isfinite(array).all():
        rows = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1) if array.ndim else [True]
        row = int(np.argmax(rows))
        raise ValueError(f"{name} holds NaN or infinity (first in row {row}); clean or impute "
                         "the data before training")


def _check_dataset_arrays(dataset, name: str) -> None:
    """NaN and infinity in the arrays of an ArrayDataset (other datasets: checked in training,
    through the loss)."""
    if isinstance(dataset, mx.gluon.data.ArrayDataset):
        for i, array in enumerate(dataset._data):
            if isinstance(array, (mx.nd.NDArray, np.ndarray)) and \
                    np.issubdtype(np.dtype(array.dtype), np.floating):
                check_finite(array.asnumpy() if isinstance(array, mx.nd.NDArray) else array,
                             f"{name} array {i}")


def source(data, name: str) -> Tuple[Source, Optional[int]]:
    """``(Source, batch_size the data itself implies or None)`` for an ``(X, y)`` tuple, a
    ``gluon.data.Dataset`` or a ``DataLoader`` (its dataset, batch size and batchify_fn are used;
    its sampler is replaced so that every worker runs the same batches)."""
    if isinstance(data, (tuple, list)) and len(data) == 2:
        X, y = _as_numpy(data[0], f"{name}[0] (X)"), _as_numpy(data[1], f"{name}[1] (y)")
        if X.ndim == 0 or y.ndim == 0:
            raise ValueError(f"{name} must be (X, y) arrays with one row per sample")
        if len(X) != len(y):
            raise ValueError(f"{name}: X has {len(X)} samples but y has {len(y)}; "
                             "give one label per sample")
        if len(X) == 0:
            raise ValueError(f"{name} is empty")
        return Source(X=X, y=y), None
    if isinstance(data, mx.gluon.data.DataLoader):
        sampler = data._batch_sampler
        batch_size = getattr(sampler, "_batch_size", None)
        src, _ = source(data._dataset, name)
        src.batchify_fn = data._batchify_fn
        return src, batch_size
    if isinstance(data, mx.gluon.data.Dataset):
        if len(data) == 0:
            raise ValueError(f"{name} is empty")
        _check_dataset_arrays(data, name)
        return Source(dataset=data), None
    raise ValueError(f"{name} must be an (X, y) tuple of arrays, a gluon.data.Dataset or a "
                     f"DataLoader, not {type(data).__name__}")
