"""Turn what a user passes as training or validation data into batches on devices.

A batch reaches each device as ``(inputs, target)``: ``inputs`` an NDArray (or a tuple of them
for a net of several inputs), ``target`` a tuple ``(labels, weight)`` with one label array per
output and the per-sample weights (or None). Arrays are prefetched by a background thread
(slicing and the copy onto the devices overlap the step); a DataLoader keeps its worker
processes or threads, fed with this worker's share of every global batch.
"""
from __future__ import annotations

import itertools
import warnings
import zlib
from typing import Iterator, List, Optional, Sequence

import numpy as np

from .. import _mx
from .._mx import mx
from ..devices import split
from .arrays import (arrays_of, check_dataset_arrays, class_weight_table, class_weights,
                     count_mismatch, several)
from .prefetch import Prefetcher
from .samples import check_fields, unstackable


class Source:
    """Samples fit can index. ``len(src)``; ``src.label_arrays`` (all labels, one array per
    output, or None where only a pass over the data would tell); ``src.load(idx, ctxs)`` gives
    ``(data_parts, target_parts)`` with one entry per context (None where a context gets no
    samples); ``src.epoch(sampler, ctxs)`` iterates ``(count, global_count, data_parts,
    target_parts)`` over a sampler's batches."""

    def __init__(self, length: int, label_arrays=None, last_batch: str = "keep"):
        self.length, self.label_arrays, self.last_batch = length, label_arrays, last_batch

    def __len__(self) -> int:
        return self.length

    def load(self, idx: np.ndarray, ctxs: Sequence["mx.Context"]):
        raise NotImplementedError

    def fingerprint(self) -> int:
        """A number that equal data gives on every worker (-1: not known without reading it
        all, as for a Dataset)."""
        return -1

    def epoch(self, sampler, ctxs) -> Iterator:
        """One pass; an empty share (count 0) loads one sample, which fit weighs with zero."""
        def batches():
            for idx, global_count in sampler.batches():
                yield (len(idx), global_count, *self.load(idx if len(idx) else np.arange(1), ctxs))
        return batches()


FINGERPRINT_ROWS = 16  # rows from each end of each array that the fingerprint reads


class ArraySource(Source):
    """``(X, y)`` / ``((X1, X2), (y1, y2), weights)`` arrays, float32, checked finite."""

    def __init__(self, inputs: List[np.ndarray], labels: List[np.ndarray], weight, several_inputs):
        super().__init__(len(inputs[0]), labels)
        self.inputs, self.labels, self.weight = inputs, labels, weight
        self.several_inputs = several_inputs

    def load(self, idx, ctxs):
        cols = [split(a[idx], ctxs, owned=True) for a in self.inputs]
        labels = [split(a[idx], ctxs, owned=True) for a in self.labels]
        weights = split(self.weight[idx], ctxs, owned=True) if self.weight is not None \
            else [None] * len(ctxs)
        return _parts(cols, labels, weights, self.several_inputs)

    def epoch(self, sampler, ctxs):
        return Prefetcher(super().epoch(sampler, ctxs))

    def fingerprint(self) -> int:
        """A checksum of the first and last rows of every array: equal-sized shards
        (``X[rank::N]``) differ in it. 24 bits, so that any float carries it exactly."""
        rows = [a[:FINGERPRINT_ROWS].tobytes() + a[-FINGERPRINT_ROWS:].tobytes()
                for a in self.inputs + self.labels]
        return zlib.crc32(b"".join(rows)) % (1 << 24)


class DatasetSource(Source):
    """A ``gluon.data.Dataset`` whose samples are ``(x, y)``, ``(x, y, weight)``, with tuples
    for several inputs or outputs. Read in this thread, or, given the user's DataLoader with
    worker processes or threads, through that loader: its workers (already running) load this
    worker's share of every global batch."""

    def __init__(self, dataset, batchify_fn=None, loader=None, last_batch: str = "keep",
                 class_weight=None, labelled: bool = True):
        super().__init__(len(dataset), _array_dataset_labels(dataset), last_batch)
        self.labelled = labelled
        self.dataset = dataset
        self.batchify_fn = batchify_fn or mx.gluon.data.dataloader.default_batchify_fn
        self.loader = loader if loader is not None and \
            _mx.loader_parts(loader)["num_workers"] > 0 else None
        self.class_weight = mx.nd.array(class_weight) if class_weight is not None else None
        self._indices = _Indices()

    def load(self, idx, ctxs):
        samples = [self.dataset[int(i)] for i in idx]
        if isinstance(samples[0], dict):
            raise ValueError(f"the dataset's samples are dicts (keys {list(samples[0])}), but "
                             "fit takes (x, y) or (x, y, sample_weight) tuples: turn them into "
                             "tuples with dataset.transform(lambda s: (s['x'], s['y']))")
        check_fields(samples, idx)
        try:
            with warnings.catch_warnings():  # numpy's note on ragged data: said below instead
                warnings.simplefilter("ignore", np.VisibleDeprecationWarning)
                batch = self.batchify_fn(samples)
        except (KeyError, TypeError, ValueError) as exc:  # None, strings, ragged arrays
            raise unstackable(samples, idx) from exc
        return self._place(batch, ctxs)

    def _place(self, batch, ctxs):
        inputs, labels, weight = unpack(batch, self.labelled)
        inputs, labels = [_float32(x) for x in inputs], [_float32(y) for y in labels]
        weight = _float32(weight) if weight is not None else None
        if self.class_weight is not None:
            by_class = self.class_weight.take(labels[0].astype("int32").reshape((-1,)))
            weight = by_class if weight is None else weight.reshape((-1,)) * by_class
        weights = split(weight, ctxs) if weight is not None else [None] * len(ctxs)
        return _parts([split(x, ctxs) for x in inputs], [split(y, ctxs) for y in labels],
                      weights, len(inputs) > 1)

    def epoch(self, sampler, ctxs):
        if self.loader is None:
            return super().epoch(sampler, ctxs)  # in this thread: the dataset's RNG stays seeded
        self._indices.sampler = sampler
        loaded = _mx.borrow_loader(self.loader, self._indices)

        def batches():
            for (idx, global_count), batch in zip(sampler.batches(), loaded):
                yield (len(idx), global_count, *self._place(batch, ctxs))
        return Prefetcher(batches())


def check_not_all_dropped(src: Source, batch_size: int, workers: int, name: str) -> None:
    """A DataLoader that drops its last, partial batch (``last_batch='discard'``) and whose
    global batch exceeds its data would leave nothing: every figure would be NaN."""
    if src.last_batch == "discard" and batch_size * workers > len(src):
        raise ValueError(f"{name}: its DataLoader drops a last, partial batch "
                         f"(last_batch='discard') and its batch of {batch_size} x {workers} "
                         f"worker(s) exceeds its {len(src)} samples, so nothing would be "
                         "evaluated; lower the batch size or use last_batch='keep'")


def _float32(array):
    """As for arrays: integers, float16 and float64 become float32."""
    return array if array.dtype == np.float32 else array.astype(np.float32)


class _Indices:
    """A DataLoader's batch sampler: this worker's share of each global batch of ``sampler``
    (one stand-in sample for an empty share, which fit weighs with zero)."""
    sampler = None

    def __iter__(self):
        for idx, _ in self.sampler.batches():
            yield idx.tolist() if len(idx) else [0]

    def __len__(self):
        return len(self.sampler)


def _parts(cols, labels, weights, several_inputs):
    data_parts, target_parts = [], []
    for c in range(len(weights)):
        if cols[0][c] is None:
            data_parts.append(None)
            target_parts.append(None)
            continue
        data_parts.append(tuple(col[c] for col in cols) if several_inputs else cols[0][c])
        target_parts.append((tuple(col[c] for col in labels), weights[c]))
    return data_parts, target_parts


def unpack(batch, labelled: bool = True):
    """``(inputs, labels, weight)`` lists of NDArrays from a batchified ``(x, y[, w])``; without
    ``labelled`` a batch that is not such a tuple is the inputs alone."""
    if not labelled and not (isinstance(batch, (list, tuple)) and len(batch) in (2, 3)):
        return (list(batch) if isinstance(batch, (list, tuple)) else [batch]), [], None
    if not isinstance(batch, (list, tuple)) or len(batch) not in (2, 3):
        raise ValueError("each sample must be (x, y) or (x, y, sample_weight), with tuples of "
                         f"arrays for several inputs or outputs; got a batch of {type(batch)}")
    flat = lambda part: list(part) if isinstance(part, (list, tuple)) else [part]
    if not labelled:
        return flat(batch[0]), [], None
    return flat(batch[0]), flat(batch[1]), batch[2] if len(batch) == 3 else None


def _array_dataset_labels(dataset) -> Optional[List[np.ndarray]]:
    arrays = _mx.array_dataset_arrays(dataset) \
        if isinstance(dataset, mx.gluon.data.ArrayDataset) else []
    if len(arrays) == 2:
        labels = arrays[1]
        return [labels.asnumpy() if isinstance(labels, mx.nd.NDArray) else np.asarray(labels)]
    return None


def source(data, name: str, class_weight=None, labelled: bool = True):
    """``(Source, batch_size the data itself implies or None)`` for ``(X, y)`` /
    ``(X, y, sample_weight)`` arrays (tuples of arrays for several inputs or outputs), a
    ``gluon.data.Dataset`` or a ``DataLoader`` (its dataset, batchify_fn, worker options and
    last_batch are kept; its sampler is replaced so that every worker runs the same batches).
    ``labelled=False`` (predict): arrays are the inputs alone, a dataset's labels are ignored."""
    if not labelled and not isinstance(data, mx.gluon.data.Dataset) and \
            not isinstance(data, mx.gluon.data.DataLoader):
        inputs = arrays_of(data, f"{name} (X)")
        if len({len(a) for a in inputs}) > 1 or len(inputs[0]) == 0:
            raise ValueError(f"{name}: give inputs with one row per sample (and as many rows "
                             "in each input)")
        return ArraySource(inputs, [], None, several(data)), None
    if isinstance(data, (tuple, list)) and len(data) in (2, 3):
        inputs, labels = arrays_of(data[0], f"{name}[0] (X)"), arrays_of(data[1], f"{name}[1] (y)")
        weight = arrays_of(data[2], f"{name}[2] (sample_weight)")[0] if len(data) == 3 else None
        named = [(f"X[{i}]" if len(inputs) > 1 else "X", a) for i, a in enumerate(inputs)]
        named += [(f"y[{i}]" if len(labels) > 1 else "y", a) for i, a in enumerate(labels)]
        named += [("sample_weight", weight)] if weight is not None else []
        if len({len(a) for _, a in named}) > 1:
            raise ValueError(count_mismatch(name, inputs, named))
        if len(inputs[0]) == 0:
            raise ValueError(f"{name} is empty")
        if weight is not None and (weight.ndim != 1 or (weight < 0).any()):
            raise ValueError(f"{name}[2] (sample_weight) must be one non-negative number per "
                             "sample")
        table = class_weight_table(class_weight)
        if table is not None:
            by_class = class_weights(table, labels[0], name)
            weight = by_class if weight is None else weight * by_class
        if weight is not None and not weight.sum() > 0:
            raise ValueError(f"{name}: every sample weighs 0; nothing would be learned")
        return ArraySource(inputs, labels, weight, several(data[0])), None
    if isinstance(data, mx.gluon.data.DataLoader):
        parts = _mx.loader_parts(data)
        sampler = parts["batch_sampler"]
        _check_sampler(sampler, len(parts["dataset"]), name)
        last_batch = _mx.batch_sampler_parts(sampler)["last_batch"]
        if last_batch not in ("keep", "discard"):
            raise ValueError(f"{name}: DataLoader(last_batch={last_batch!r}) carries samples "
                             "into the next epoch, which would give workers different batch "
                             "counts; use 'keep' or 'discard'")
        src = _dataset_source(parts["dataset"], name, parts["batchify_fn"], data, last_batch,
                              class_weight, labelled)
        return src, _mx.batch_sampler_parts(sampler)["batch_size"]
    check_kind(data, name)
    return _dataset_source(data, name, None, None, "keep", class_weight, labelled), None


def check_kind(data, name: str) -> None:
    """Raise ValueError unless ``data`` is of a kind fit reads: ``(X, y)`` or ``(X, y,
    sample_weight)``, a Dataset or a DataLoader."""
    if isinstance(data, (tuple, list)) and len(data) in (2, 3) or \
            isinstance(data, (mx.gluon.data.Dataset, mx.gluon.data.DataLoader)):
        return
    kind = f"a {type(data).__name__} of {len(data)}" if isinstance(data, (tuple, list)) \
        else type(data).__name__
    raise ValueError(f"{name} must be an (X, y) tuple of arrays (or (X, y, sample_weight)), a "
                     f"gluon.data.Dataset or a DataLoader, not {kind}")


def _check_sampler(batch_sampler, length: int, name: str) -> None:
    """fit makes every worker's batches itself, from the whole dataset: refuse a DataLoader
    whose sampler means something fit would silently drop (a subset, repeats, a custom
    batching). A sampler of any kind that draws every sample once is only an order: fit takes
    its own, as for MXNet's Random and Sequential samplers."""
    if not isinstance(batch_sampler, mx.gluon.data.BatchSampler):
        raise ValueError(f"{name}: fit makes the batches itself (the same on every worker) and "
                         f"cannot follow a custom batch_sampler ({type(batch_sampler).__name__});"
                         " give the DataLoader a batch_size instead")
    inner = _mx.batch_sampler_parts(batch_sampler)["sampler"]
    if isinstance(inner, (mx.gluon.data.RandomSampler, mx.gluon.data.SequentialSampler)) and \
            len(inner) == length:
        return
    drawn = _drawn(inner, length, name)
    inside = drawn[(drawn >= 0) & (drawn < length)]
    if len(drawn) == length and len(np.unique(inside)) == length:
        return
    more = "more than " if len(drawn) > length else ""
    raise ValueError(f"{name}: the DataLoader's sampler ({type(inner).__name__}) draws "
                     f"{more}{min(len(drawn), length)} indices covering {len(np.unique(inside))} "
                     f"of the dataset's {length} samples, but fit reads every sample once per "
                     "epoch, in its own order; pass a dataset of just the samples to use (and "
                     "sample_weight or class_weight to weigh them)")


def _drawn(sampler, length: int, name: str) -> np.ndarray:
    """The indices one pass of ``sampler`` draws (at most ``length + 1``: it may be endless)."""
    try:
        return np.fromiter(itertools.islice(iter(sampler), length + 1), dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: the DataLoader's sampler ({type(sampler).__name__}) does not "
                         f"draw sample indices ({exc}); give the DataLoader a batch_size and "
                         "shuffle instead") from exc


def _dataset_source(dataset, name, batchify_fn, loader, last_batch, class_weight, labelled):
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty")
    check_dataset_arrays(dataset, name)
    return DatasetSource(dataset, batchify_fn, loader, last_batch,
                         class_weight_table(class_weight), labelled)
