"""What fit checks of a Dataset's samples when MXNet cannot batch them, so that the message
names the sample at fault and what is wrong with it."""
from __future__ import annotations

import collections
import warnings
from typing import Sequence

import numpy as np


def check_fields(samples: Sequence, idx: Sequence[int]) -> None:
    """Every sample of a batch has as many fields (MXNet's batchify would silently drop a
    field that only some samples have, a weight on one sample, say)."""
    lengths = [len(x) if isinstance(x, (tuple, list)) else 0 for x in samples]
    at, usual = _first_unusual(lengths)
    if at is not None:
        raise ValueError(f"the dataset's samples have different numbers of fields (sample "
                         f"{int(idx[at])} has {lengths[at]}, most have {usual}): every "
                         "sample must be (x, y) or every one (x, y, sample_weight)")


def unstackable(samples: Sequence, idx: Sequence[int]) -> ValueError:
    """The error for a batch of samples that MXNet could not stack, naming the first sample
    with a field that is not numbers, else the first whose shapes differ from most samples'."""
    shapes = [_shape(sample) for sample in samples]
    at = shapes.index(None) if None in shapes else _first_unusual(list(map(repr, shapes)))[0]
    at = at or 0
    return ValueError(f"the dataset's samples cannot be stacked into a batch (sample "
                      f"{int(idx[at])} is {_kinds(samples[at])}): every field must be "
                      "a number or an array of numbers, of one shape in every sample; "
                      "transform the others into numbers or leave them out")


def _first_unusual(values: list):
    """``(position of the first value unlike the most common one or None, that value)``."""
    usual = collections.Counter(values).most_common(1)[0][0]
    return next((i for i, v in enumerate(values) if v != usual), None), usual


def _shape(field):
    """A field's shape (a tuple of them for a tuple of fields), None when a part of it is not
    numbers."""
    if isinstance(field, (tuple, list)) and not _numeric(field):
        parts = [_shape(f) for f in field]
        return None if None in parts else tuple(parts)
    return np.shape(field) if _numeric(field) else None


def _numeric(field) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's note on ragged sequences: that is the answer
        try:
            return np.asarray(field).dtype.kind in "biuf"
        except (ValueError, TypeError):
            return False


def _kinds(field) -> str:
    """A sample's fields by type, as "(ndarray float32, NoneType)"."""
    if isinstance(field, (tuple, list)):
        return "(" + ", ".join(_kinds(f) for f in field) + ")"
    if isinstance(field, np.generic):
        return str(field.dtype)
    dtype = getattr(field, "dtype", None)
    return type(field).__name__ + (f" {dtype}" if dtype is not None else "")
