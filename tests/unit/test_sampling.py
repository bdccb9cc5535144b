"""ShardedBatchSampler: every worker the same number of batches, uneven batches split evenly
or dropped, shuffles that differ by epoch and repeat by seed."""
import numpy as np
import pytest

from gluondist.kv.sampling import MXNET, SHUFFLE, derive_seed
from gluondist.kvstore import ShardedBatchSampler


def _epoch(sampler):
    return list(sampler.batches())


@pytest.mark.parametrize("length,batch,workers", [(100, 8, 3), (7, 2, 3), (64, 32, 2), (5, 1, 4)])
def test_every_worker_runs_the_same_number_of_batches(length, batch, workers):
    epochs = [_epoch(ShardedBatchSampler(length, batch, workers, r, seed=1))
              for r in range(workers)]
    counts = {len(e) for e in epochs}
    assert counts == {len(ShardedBatchSampler(length, batch, workers, 0))}
    # Each global batch is the union of the workers' slices, and the epoch covers every sample.
    single = _epoch(ShardedBatchSampler(length, batch * workers, 1, 0, seed=1))
    assert len(single) == counts.pop()
    for i, (global_idx, global_count) in enumerate(single):
        parts = [epochs[r][i][0] for r in range(workers)]
        assert np.array_equal(np.concatenate(parts), global_idx)
        assert all(epochs[r][i][1] == global_count == len(global_idx) for r in range(workers))
    assert sorted(np.concatenate([b for b, _ in single])) == list(range(length))


def test_last_partial_batch_is_split_evenly_or_dropped():
    shares = [_epoch(ShardedBatchSampler(10, 4, 2, r, shuffle=False))[-1][0] for r in range(2)]
    assert [list(s) for s in shares] == [[8], [9]]
    tiny = [_epoch(ShardedBatchSampler(9, 4, 2, r, shuffle=False))[-1][0] for r in range(2)]
    assert [list(s) for s in tiny] == [[8], []]
    assert len(ShardedBatchSampler(10, 4, 2, 0, last_batch="discard")) == 1


def test_epochs_are_shuffled_differently_but_reproducibly():
    s = ShardedBatchSampler(50, 5, seed=3)
    first = [b.tolist() for b, _ in s.batches()]
    s.set_epoch(1)
    second = [b.tolist() for b, _ in s.batches()]
    assert first != second
    s.set_epoch(0)
    assert [b.tolist() for b, _ in s.batches()] == first
    assert list(s) == first  # usable as a DataLoader batch_sampler


@pytest.mark.parametrize("kwargs,message", [
    (dict(length=0, batch_size=1), "empty"),
    (dict(length=5, batch_size=0), "batch_size"),
    (dict(length=5, batch_size=1, num_workers=2, rank=2), "rank 2"),
    (dict(length=5, batch_size=1, last_batch="rollover"), "last_batch"),
])
def test_sampler_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ShardedBatchSampler(**kwargs)


def test_every_stream_epoch_and_rank_gets_its_own_seed():
    seeds = {(s, stream, e, r): derive_seed(s, stream, e, r) for s in range(8)
             for stream in (SHUFFLE, MXNET) for e in range(8) for r in range(3)}
    assert len(set(seeds.values())) == len(seeds)
    assert derive_seed(0, SHUFFLE, 1) != derive_seed(1, SHUFFLE, 0)  # no seed + epoch
    assert derive_seed(7, SHUFFLE, 3) != derive_seed(7, SHUFFLE, 3, 0)  # no zero padding
    assert derive_seed(7, SHUFFLE, 3) == derive_seed(7, SHUFFLE, 3)


def test_as_a_dataloaders_batch_sampler_every_worker_gets_full_batches():
    # issue 36, defect 3: with last_batch='keep' worker 1's share of the last global batch of
    # 17 samples (4 x 2 workers) was empty, and MXNet's batchify failed on it; a DataLoader
    # cannot tell the loop a batch's global count, so it takes full global batches only
    import mxnet as mx
    dataset = mx.gluon.data.ArrayDataset(np.arange(17, dtype=np.float32))
    loaders = [mx.gluon.data.DataLoader(dataset, batch_sampler=ShardedBatchSampler(
        17, 4, 2, rank, seed=1, last_batch="discard")) for rank in range(2)]
    batches = [[b.asnumpy().tolist() for b in loader] for loader in loaders]
    assert [len(b) for b in batches] == [2, 2] and all(len(x) == 4 for b in batches for x in b)
    whole = [np.concatenate(parts).tolist() for parts in zip(*batches)]
    assert whole == [b.tolist() for b, _ in ShardedBatchSampler(17, 8, seed=1).batches()][:2]
    for rank in range(2):
        kept = ShardedBatchSampler(17, 4, 2, rank, seed=1)
        with pytest.raises(ValueError, match=r"17 samples .* leave 1 .* last_batch='discard'"):
            list(mx.gluon.data.DataLoader(dataset, batch_sampler=kept))
    even = ShardedBatchSampler(16, 4, 2, 1, seed=1)  # keep, and every global batch full
    assert list(even) == [b.tolist() for b, _ in even.batches()]
    with pytest.raises(ValueError, match="global batch of 2 .* 3 workers"):
        list(ShardedBatchSampler(8, 1, 3, 2, last_batch="discard", global_batch_size=2))


def test_a_discarding_sampler_with_no_full_global_batch_is_refused():
    # 100 samples, 60 per worker on 2: every epoch was silently empty (a new user's find)
    with pytest.raises(ValueError, match=r"^100 samples hold no full global batch of 120: "
                                         r"with last_batch='discard' every epoch would be empty"):
        ShardedBatchSampler(100, 60, 2, 0, last_batch="discard")
    assert len(ShardedBatchSampler(100, 60, 2, 0)) == 1  # kept: one partial batch
    assert len(ShardedBatchSampler(120, 60, 2, 1, last_batch="discard")) == 1
