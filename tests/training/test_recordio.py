"""fit on MXNet's RecordIO (``.rec`` + ``.idx``): gluondist.recordio's records, MXNet's
ImageRecordDataset, in this thread and through a DataLoader's worker processes; the same
results as the same data as arrays; and fit reads no sample outside the batches it runs."""
import collections
import io
import os

import mxnet as mx
import numpy as np
import pytest

from gluondist import kvstore
from gluondist.recordio import ArrayRecordDataset, pack
from gluondist.training.data import source

from conftest import assert_same_history, assert_same_params, curves, fit_mlp

gdata = mx.gluon.data


def write_records(path, X, y):
    """``X``'s rows (float32) and labels ``y`` as path.rec and path.idx."""
    writer = mx.recordio.MXIndexedRecordIO(f"{path}.idx", f"{path}.rec", "w")
    for i, (x, label) in enumerate(zip(X, y)):
        writer.write_idx(i, pack(x, label))
    writer.close()
    return f"{path}.rec"


class Counted(gdata.Dataset):
    """``dataset``, appending each index it is asked for to the file ``log`` (one line each,
    from whatever process reads it: a DataLoader's workers too)."""

    def __init__(self, dataset, log):
        self.dataset, self.log = dataset, str(log)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        with open(self.log, "a") as f:
            f.write(f"{i}\n")
        return self.dataset[i]


def reads(log):
    return collections.Counter(int(line) for line in open(log)) if os.path.exists(log) \
        else collections.Counter()


@pytest.fixture
def records(small, tmp_path):
    """The 400 training digits as a RecordIO file of float32 rows, and the arrays."""
    (X, y), _ = small
    return write_records(tmp_path / "train", X, y), (X, y)


def test_a_record_reads_back_as_the_array_and_label_packed(tmp_path):
    x = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = write_records(tmp_path / "r", [x, x[::-1]], [3, [1.0, 2.5]])
    dataset = ArrayRecordDataset(path, (2, 3, 4), "uint8")
    (a, la), (b, lb) = dataset[0], dataset[1]
    assert len(dataset) == 2 and a.dtype == np.float32 and np.array_equal(a, x)
    assert np.array_equal(b, x[::-1]) and la == np.float32(3) and la.dtype == np.float32
    assert lb.tolist() == [1.0, 2.5] and lb.dtype == np.float32
    with pytest.raises(ValueError, match=r"record 0 of .*r\.rec holds 24 bytes, but shape "
                                         r"\(2, 3, 5\) of uint8 takes 30; give the shape"):
        ArrayRecordDataset(path, (2, 3, 5))[0]


def test_fit_on_records_ends_as_fit_on_the_same_arrays(records):
    path, (X, y) = records
    on_records, h = fit_mlp(ArrayRecordDataset(path, (64,), "float32"), epochs=2)
    on_arrays, h_arrays = fit_mlp((X, y), epochs=2)
    assert_same_params(on_records, on_arrays)  # the same batches, float32 alike: bit-equal
    assert curves(h.history) == curves(h_arrays.history)


def test_a_dataloaders_worker_processes_read_the_records(records, tmp_path):
    path, _ = records
    dataset = ArrayRecordDataset(path, (64,), "float32")
    loader = gdata.DataLoader(Counted(dataset, tmp_path / "log"), batch_size=30, shuffle=True,
                              num_workers=2)
    by_workers, _ = fit_mlp(loader, epochs=2)
    in_process, _ = fit_mlp(dataset, epochs=2)
    assert_same_params(by_workers, in_process, 1e-6)
    # fit's check of a first batch (samples 0..29) in this process, the rest by the workers
    assert reads(tmp_path / "log") == collections.Counter(
        {i: 2 + (i < 30) for i in range(len(dataset))})


def test_fit_on_an_image_record_file_trains_as_on_the_decoded_arrays(small, tmp_path):
    from PIL import Image
    (X, y), _ = small
    images = (X.reshape(-1, 8, 8) * 255).round().astype(np.uint8)
    writer = mx.recordio.MXIndexedRecordIO(str(tmp_path / "img.idx"), str(tmp_path / "img.rec"),
                                           "w")
    for i, (image, label) in enumerate(zip(images, y)):
        png = io.BytesIO()
        Image.fromarray(image).save(png, format="PNG")  # lossless: decodes to the same pixels
        writer.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, label, i, 0),
                                             png.getvalue()))
    writer.close()
    dataset = gdata.vision.ImageRecordDataset(str(tmp_path / "img.rec"), flag=0) \
        .transform_first(gdata.vision.transforms.ToTensor())
    loader = gdata.DataLoader(dataset, batch_size=30, shuffle=True, num_workers=2)
    on_records, h = fit_mlp(loader, epochs=2)
    decoded = images[:, None].astype(np.float32) / 255  # ToTensor: CHW, float32 in [0, 1]
    on_arrays, h_arrays = fit_mlp((decoded, y), epochs=2)
    assert_same_params(on_records, on_arrays, 1e-6)
    assert_same_history(h, h_arrays, rtol=1e-6)
    assert h.history["accuracy"][-1] > 0.6  # it learns (0.1 by chance)


@pytest.mark.parametrize("workers", [0, 2])
def test_fit_reads_each_sample_once_an_epoch_and_nothing_more(records, small, tmp_path,
                                                              workers):
    """No pass over the data: with the default ('auto') metrics, class_weight and validation,
    fit reads every training sample once an epoch, every validation sample once a validation
    pass, and before training the first batch of each (its check of shapes, labels and loss:
    samples 0..batch_size-1)."""
    path, _ = records
    (_, _), (Xv, yv) = small
    train = Counted(ArrayRecordDataset(path, (64,), "float32"), tmp_path / "train.log")
    val = Counted(ArrayRecordDataset(write_records(tmp_path / "val", Xv, yv), (64,),
                                     "float32"), tmp_path / "val.log")
    data = gdata.DataLoader(train, batch_size=30, shuffle=True, num_workers=workers) \
        if workers else train
    fit_mlp(data, epochs=3, val_data=val, class_weight={k: 1.0 + k for k in range(10)})
    assert reads(tmp_path / "train.log") == collections.Counter(
        {i: 3 + (i < 30) for i in range(400)})
    assert reads(tmp_path / "val.log") == collections.Counter(
        {i: 3 + (i < 30) for i in range(200)})


@pytest.mark.parametrize("workers", [0, 2])
def test_each_worker_reads_only_its_slices_of_each_global_batch(records, tmp_path, workers):
    """Worker r of 2 reads exactly its slices of the epoch's global batches (the sampler fit
    runs), in this thread and through a DataLoader's worker processes."""
    path, _ = records
    dataset = ArrayRecordDataset(path, (64,), "float32")
    seen = []
    for rank in range(2):
        log = tmp_path / f"rank{rank}.log"
        counted = Counted(dataset, log)
        data = gdata.DataLoader(counted, batch_size=30, num_workers=workers) if workers \
            else counted
        src, _ = source(data, "train_data")
        sampler = kvstore.ShardedBatchSampler(len(src), 30, 2, rank, seed=5)
        sampler.set_epoch(1)
        slices = [idx for idx, _ in sampler.batches()]
        for _ in src.epoch(sampler, [mx.cpu()]):
            pass
        assert reads(log) == collections.Counter(np.concatenate(slices).tolist())
        seen.append(set(reads(log)))
    assert seen[0].isdisjoint(seen[1]) and seen[0] | seen[1] == set(range(400))
