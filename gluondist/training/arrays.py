"""What fit checks of arrays a user passes: numbers, finite, one row per sample, with weights
and class weights that make sense; every message names the array and the fix."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .. import _mx
from .._mx import mx


def as_float32(array, name: str) -> np.ndarray:
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
    if array.ndim == 0:
        raise ValueError(f"{name} must be an array with one row per sample")
    check_finite(array, name)
    return array


def check_finite(array: np.ndarray, name: str) -> None:
    """Raise ValueError naming the first row of ``array`` with a NaN or infinity."""
    if array.size and not np.isfinite(array).all():
        rows = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)
        row = int(np.argmax(rows))
        raise ValueError(f"{name} holds NaN or infinity (first in row {row}); clean or impute "
                         "the data before training")


def check_dataset_arrays(dataset, name: str) -> None:
    """NaN and infinity in the arrays of an ArrayDataset (other datasets: checked in training,
    through the loss)."""
    if isinstance(dataset, mx.gluon.data.ArrayDataset):
        for i, array in enumerate(_mx.array_dataset_arrays(dataset)):
            if isinstance(array, (mx.nd.NDArray, np.ndarray)) and \
                    np.issubdtype(np.dtype(array.dtype), np.floating):
                check_finite(array.asnumpy() if isinstance(array, mx.nd.NDArray) else array,
                             f"{name} array {i}")


def several(part) -> bool:
    """A tuple or list of arrays (several inputs or outputs), not one array given as lists."""
    return isinstance(part, (tuple, list)) and len(part) > 0 and \
        all(isinstance(p, (np.ndarray, mx.nd.NDArray)) for p in part)


def arrays_of(part, name: str) -> List[np.ndarray]:
    if several(part):
        return [as_float32(p, f"{name}[{i}]") for i, p in enumerate(part)]
    return [as_float32(part, name)]


def class_weight_table(class_weight) -> Optional[np.ndarray]:
    """The weights of classes 0..K-1 as an array; as Keras, the keys must be exactly 0..K-1."""
    if class_weight is None:
        return None
    keys = sorted(class_weight) if isinstance(class_weight, dict) else None
    if keys is None or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                               for k in keys) or keys != list(range(len(keys))):
        raise ValueError("class_weight must be a dict from every class index 0..K-1 to its "
                         "weight, such as {0: 1.0, 1: 5.0}")
    values = [class_weight[k] for k in keys]
    if not all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and
               np.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"class_weight values must be non-negative numbers, not {values}")
    return np.array(values, dtype=np.float32)


def class_weights(table: np.ndarray, labels: np.ndarray, name: str) -> np.ndarray:
    if labels.ndim != 1:
        raise ValueError("class_weight needs class-index labels (one per sample) for the first "
                         "output; give sample weights instead")
    bad = (labels != np.round(labels)) | (labels < 0) | (labels >= len(table))
    if bad.any():
        raise ValueError(f"class_weight covers classes 0..{len(table) - 1} but {name} has "
                         f"the label {labels[bad][0]:g}; give a weight for every class")
    return table[labels.astype(np.int64)]


def count_mismatch(name: str, inputs, named) -> str:
    """Why the arrays of ``name`` have different lengths, in one short line."""
    if len(inputs) > 1 and len(inputs) == len(named[-1][1]):  # rows given as a list
        return (f"{name}: X is a list of {len(inputs)} arrays, which fit reads as "
                f"{len(inputs)} inputs of the net; for one input of {len(inputs)} samples pass "
                "one array (np.stack(X))")
    by_length: dict = {}
    for n, a in named:
        by_length.setdefault(len(a), []).append(n)
    counts = " but ".join(", ".join(ns[:3]) + (f" and {len(ns) - 3} more" if len(ns) > 3 else "")
                       + f" {'have' if len(ns) > 1 else 'has'} {k}"
                       for k, ns in by_length.items())
    return f"{name}: {counts} samples; give one label (and weight) per sample"
