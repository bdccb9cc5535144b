"""Turn what a user passes as training or validation data into batches on devices.

A batch reaches each device as ``(inputs, target)``: ``inputs`` an NDArray (or a tuple of them
for a net of several inputs), ``target`` a tuple ``(labels, weight)`` with one label array per
output and the per-sample weights (or None). Arrays are prefetched by a background thread
(slicing and the copy onto the devices overlap the step); a DataLoader keeps its worker
processes or threads, fed with this worker's share of every global batch.
"""
from __future__ import annotations

import collections
import queue
import threading
import warnings
import zlib
from typing import Iterator, List, Optional, Sequence

import numpy as np

from .._mx import mx
from ..parallel import split



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
        self.loader = loader if loader is not None and loader._num_workers > 0 else None
        self.class_weight = mx.nd.array(class_weight) if class_weight is not None else None
        self._indices = _Indices()

    def load(self, idx, ctxs):
        samples = [self.dataset[int(i)] for i in idx]
        if isinstance(samples[0], dict):
            raise ValueError(f"the dataset's samples are dicts (keys {list(samples[0])}), but "
                             "fit takes (x, y) or (x, y, sample_weight) tuples: turn them into "
                             "tuples with dataset.transform(lambda s: (s['x'], s['y']))")
        lengths = [len(x) if isinstance(x, (tuple, list)) else 0 for x in samples]
        usual = collections.Counter(lengths).most_common(1)[0][0]
        if any(n != usual for n in lengths):  # MXNet's batchify would drop the extra fields
            at = next(i for i, n in enumerate(lengths) if n != usual)
            raise ValueError(f"the dataset's samples have different numbers of fields (sample "
                             f"{int(idx[at])} has {lengths[at]}, most have {usual}): every "
                             "sample must be (x, y) or every one (x, y, sample_weight)")
        try:
            with warnings.catch_warnings():  # numpy's note on ragged data: said below instead
                warnings.simplefilter("ignore", np.VisibleDeprecationWarning)
                batch = self.batchify_fn(samples)
        except (KeyError, TypeError, ValueError) as exc:  # None, strings, ragged arrays
            at = _odd_one(samples)
            raise ValueError(f"the dataset's samples cannot be stacked into a batch (sample "
                             f"{int(idx[at])} is {_kinds(samples[at])}): every field must be "
                             "a number or an array of numbers, of one shape in every sample; "
                             "transform the others into numbers or leave them out") from exc
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
        loaded = _borrow(self.loader, self._indices)

        def batches():
            for (idx, global_count), batch in zip(sampler.batches(), loaded):
                yield (len(idx), global_count, *self._place(batch, ctxs))
        return Prefetcher(batches())


def _borrow(loader, batch_sampler):
    """``loader``'s batches drawn by ``batch_sampler`` instead of its own: its worker pool
    (created with the loader) does the work. The loader's own sampler is back in place as soon
    as the pass has started (MXNet reads it once, when the pass begins)."""
    own = loader._batch_sampler
    loader._batch_sampler = batch_sampler
    try:
        batches = iter(loader)
        first = next(batches, None)
    finally:
        loader._batch_sampler = own
    if first is not None:
        yield first
        yield from batches


def check_not_all_dropped(src: Source, batch_size: int, workers: int, name: str) -> None:
    """A DataLoader that drops its last, partial batch (``last_batch='discard'``) and whose
    global batch exceeds its data would leave nothing: every figure would be NaN."""
    if src.last_batch == "discard" and batch_size * workers > len(src):
        raise ValueError(f"{name}: its DataLoader drops a last, partial batch "
                         f"(last_batch='discard') and its batch of {batch_size} x {workers} "
                         f"worker(s) exceeds its {len(src)} samples, so nothing would be "
                         "evaluated; lower the batch size or use last_batch='keep'")


def check_count(value, name: str, least: int) -> None:
    """Raise ValueError unless ``value`` is an integer (not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        kind = "positive" if least > 0 else "non-negative"
        raise ValueError(f"{name} must be a {kind} integer, not {value!r}")


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


def _odd_one(samples) -> int:
    """The position of the first sample with a field that is not numbers, else of the first
    whose shapes differ from most samples' (0 when none stands out)."""
    shapes = [_shape(sample) for sample in samples]
    if None in shapes:
        return shapes.index(None)
    usual = collections.Counter(map(repr, shapes)).most_common(1)[0][0]
    return next((i for i, shape in enumerate(shapes) if repr(shape) != usual), 0)


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


class Prefetcher:
    """Runs an iterator in a background thread, at most ``depth`` items ahead. Its exceptions
    are raised where the item would have been; closing (or leaving the loop) stops it."""

    def __init__(self, iterator, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(iterator,), daemon=True,
                                        name="gluondist-prefetch")
        self._thread.start()

    def _run(self, iterator):
        try:
            for item in iterator:
                if not self._put((True, item)):
                    return
            self._put((False, None))
        except BaseException as exc:  # handed to the consumer, raised there with its traceback
            self._put((None, exc))

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self):
        try:
            while True:
                ok, item = self._queue.get()
                if ok is None:
                    raise item
                if not ok:
                    return
                yield item
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        # A thread blocked in a slow source sees the flag at its next item; it is a daemon, so
        # waiting a moment is enough (an error in training must not wait for the data).
        self._thread.join(timeout=1.0)


def _array_dataset_labels(dataset) -> Optional[List[np.ndarray]]:
    if isinstance(dataset, mx.gluon.data.ArrayDataset) and len(dataset._data) == 2:
        labels = dataset._data[1]
        return [labels.asnumpy() if isinstance(labels, mx.nd.NDArray) else np.asarray(labels)]
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


def _check_dataset_arrays(dataset, name: str) -> None:
    """NaN and infinity in the arrays of an ArrayDataset (other datasets: checked in training,
    through the loss)."""
    if isinstance(dataset, mx.gluon.data.ArrayDataset):
        for i, array in enumerate(dataset._data):
            if isinstance(array, (mx.nd.NDArray, np.ndarray)) and \
                    np.issubdtype(np.dtype(array.dtype), np.floating):
                check_finite(array.asnumpy() if isinstance(array, mx.nd.NDArray) else array,
                             f"{name} array {i}")


def _several(part) -> bool:
    """A tuple or list of arrays (several inputs or outputs), not one array given as lists."""
    return isinstance(part, (tuple, list)) and len(part) > 0 and \
        all(isinstance(p, (np.ndarray, mx.nd.NDArray)) for p in part)


def _arrays(part, name: str) -> List[np.ndarray]:
    if _several(part):
        return [_as_numpy(p, f"{name}[{i}]") for i, p in enumerate(part)]
    return [_as_numpy(part, name)]


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


def _class_weights(table: np.ndarray, labels: np.ndarray, name: str) -> np.ndarray:
    if labels.ndim != 1:
        raise ValueError("class_weight needs class-index labels (one per sample) for the first "
                         "output; give sample weights instead")
    bad = (labels != np.round(labels)) | (labels < 0) | (labels >= len(table))
    if bad.any():
        raise ValueError(f"class_weight covers classes 0..{len(table) - 1} but {name} has "
                         f"the label {labels[bad][0]:g}; give a weight for every class")
    return table[labels.astype(np.int64)]


def source(data, name: str, class_weight=None, labelled: bool = True):
    """``(Source, batch_size the data itself implies or None)`` for ``(X, y)`` /
    ``(X, y, sample_weight)`` arrays (tuples of arrays for several inputs or outputs), a
    ``gluon.data.Dataset`` or a ``DataLoader`` (its dataset, batchify_fn, worker options and
    last_batch are kept; its sampler is replaced so that every worker runs the same batches).
    ``labelled=False`` (predict): arrays are the inputs alone, a dataset's labels are ignored."""
    if not labelled and not isinstance(data, mx.gluon.data.Dataset) and \
            not isinstance(data, mx.gluon.data.DataLoader):
        inputs = _arrays(data, f"{name} (X)")
        if len({len(a) for a in inputs}) > 1 or len(inputs[0]) == 0:
            raise ValueError(f"{name}: give inputs with one row per sample (and as many rows "
                             "in each input)")
        return ArraySource(inputs, [], None, _several(data)), None
    if isinstance(data, (tuple, list)) and len(data) in (2, 3):
        inputs, labels = _arrays(data[0], f"{name}[0] (X)"), _arrays(data[1], f"{name}[1] (y)")
        weight = _arrays(data[2], f"{name}[2] (sample_weight)")[0] if len(data) == 3 else None
        named = [(f"X[{i}]" if len(inputs) > 1 else "X", a) for i, a in enumerate(inputs)]
        named += [(f"y[{i}]" if len(labels) > 1 else "y", a) for i, a in enumerate(labels)]
        named += [("sample_weight", weight)] if weight is not None else []
        if len({len(a) for _, a in named}) > 1:
            raise ValueError(_count_mismatch(name, inputs, named))
        if len(inputs[0]) == 0:
            raise ValueError(f"{name} is empty")
        if weight is not None and (weight.ndim != 1 or (weight < 0).any()):
            raise ValueError(f"{name}[2] (sample_weight) must be one non-negative number per "
                             "sample")
        table = class_weight_table(class_weight)
        if table is not None:
            by_class = _class_weights(table, labels[0], name)
            weight = by_class if weight is None else weight * by_class
        if weight is not None and not weight.sum() > 0:
            raise ValueError(f"{name}: every sample weighs 0; nothing would be learned")
        return ArraySource(inputs, labels, weight, _several(data[0])), None
    if isinstance(data, mx.gluon.data.DataLoader):
        sampler = data._batch_sampler
        _check_sampler(sampler, len(data._dataset), name)
        last_batch = getattr(sampler, "_last_batch", "keep")
        if last_batch not in ("keep", "discard"):
            raise ValueError(f"{name}: DataLoader(last_batch={last_batch!r}) carries samples "
                             "into the next epoch, which would give workers different batch "
                             "counts; use 'keep' or 'discard'")
        src = _dataset_source(data._dataset, name, data._batchify_fn, data, last_batch,
                              class_weight, labelled)
        return src, getattr(sampler, "_batch_size", None)
    if isinstance(data, mx.gluon.data.Dataset):
        return _dataset_source(data, name, None, None, "keep", class_weight, labelled), None
    raise ValueError(f"{name} must be an (X, y) tuple of arrays, a gluon.data.Dataset or a "
                     f"DataLoader, not {type(data).__name__}")


def _count_mismatch(name: str, inputs, named) -> str:
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


def _check_sampler(batch_sampler, length: int, name: str) -> None:
    """fit makes every worker's batches itself, from the whole dataset: refuse a DataLoader
    whose sampler means something fit would silently drop (a subset, a custom batching)."""
    if not isinstance(batch_sampler, mx.gluon.data.BatchSampler):
        raise ValueError(f"{name}: fit makes the batches itself (the same on every worker) and "
                         f"cannot follow a custom batch_sampler ({type(batch_sampler).__name__});"
                         " give the DataLoader a batch_size instead")
    inner = batch_sampler._sampler
    if len(inner) != length or not isinstance(
            inner, (mx.gluon.data.RandomSampler, mx.gluon.data.SequentialSampler)):
        raise ValueError(f"{name}: the DataLoader's sampler ({type(inner).__name__}) picks "
                         f"{len(inner)} of the dataset's {length} samples, but fit reads all of "
                         "them in its own order; pass a dataset of just the samples to use")


def _dataset_source(dataset, name, batchify_fn, loader, last_batch, class_weight, labelled):
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty")
    _check_dataset_arrays(dataset, name)
    return DatasetSource(dataset, batchify_fn, loader, last_batch,
                         class_weight_table(class_weight), labelled)
