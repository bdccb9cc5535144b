import json
import math
from pathlib import Path

import numpy as np
import pytest

from gluondist import envvars, kvstore, recipes
from gluondist.kvstore import ShardedBatchSampler


def test_outside_a_job_this_process_is_alone(monkeypatch):
    monkeypatch.delenv(envvars.DMLC_ROLE, raising=False)
    assert (kvstore.role(), kvstore.is_distributed(), kvstore.rank(), kvstore.num_workers()) == \
        (None, False, 0, 1)


def test_launched_worker_reads_its_place_from_the_environment(monkeypatch):
    monkeypatch.setenv(envvars.DMLC_ROLE, "worker")
    monkeypatch.setenv(envvars.DMLC_NUM_WORKER, "4")
    monkeypatch.setenv(envvars.GLUONDIST_RANK, "3")
    assert (kvstore.is_distributed(), kvstore.rank(), kvstore.num_workers()) == (True, 3, 4)
    assert kvstore.resolve_mode("auto") == "dist_sync"
    monkeypatch.setenv(envvars.GLUONDIST_KVSTORE, "dist_async")
    assert kvstore.resolve_mode("auto") == "dist_async"


def test_auto_kind_in_one_process(monkeypatch):
    monkeypatch.delenv(envvars.DMLC_ROLE, raising=False)
    assert kvstore.resolve_mode("auto", 1) is None
    assert kvstore.resolve_mode("auto", 2) == "device"
    assert kvstore.create("local").type == "local"
    assert kvstore.create("auto", 1) is None


def test_unknown_kind_lists_the_valid_ones():
    with pytest.raises(ValueError, match="dist_sync, dist_async, dist_device_sync"):
        kvstore.create("dist")


def test_dist_kind_outside_a_job_says_how_to_launch(monkeypatch):
    monkeypatch.delenv(envvars.DMLC_ROLE, raising=False)
    with pytest.raises(RuntimeError, match="gluondist launch"):
        kvstore.create("dist_sync")


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


def test_parameter_server_recipe_trains_in_one_process(digits):
    import mxnet as mx
    X, y = digits
    losses = recipes.train_parameter_server(mx.gluon.nn.Dense(10), X, y, epochs=3,
                                            batch_size=32,
                                            optimizer_params={"learning_rate": 0.5})
    assert len(losses) == 3 and losses[-1] < losses[0] * 0.5


def _server_index(key, servers):
    """What MXNet 1.9.1 computes for a small array's server: (key * 9973) % servers in a C int
    (C's % keeps the dividend's sign)."""
    product = (key * 9973) & 0xFFFFFFFF
    product -= (1 << 32) if product >= 1 << 31 else 0
    return int(math.fmod(product, servers))


def test_allreduce_keys_stay_on_a_server_for_any_length():
    # 2**30 + 107,665, the key the old scheme gave 107,665 values, is where the index turns
    # negative: the model of MXNet's arithmetic must see that.
    assert _server_index((1 << 30) + 107_665, 3) < 0
    for n in (1, 2, kvstore.REDUCE_CHUNK, kvstore.REDUCE_CHUNK + 1, 107_665, 120_002,
              10 ** 7, kvstore.MAX_REDUCE):
        keys = kvstore.reduce_keys(n)
        assert len(keys) * kvstore.REDUCE_CHUNK >= n and len(set(keys)) == len(keys)
        assert keys == [(1 << 30) + n] or n > kvstore.REDUCE_CHUNK
        for key in keys[:3] + keys[-3:]:
            assert key < 2 ** 31 and all(_server_index(key, s) >= 0 for s in range(1, 65))
    with pytest.raises(ValueError, match="at most"):
        kvstore.reduce_keys(kvstore.MAX_REDUCE + 1)


@pytest.mark.slow
@pytest.mark.parametrize("servers,fit", [(3, False), (4, True)])
def test_allreduce_of_long_vectors_with_several_servers(launch, tmp_path, servers, fit):
    # 120,002 values is what fit averages for a Dense(60001) + BatchNorm net: with keys
    # 2**30 + n it crashed MXNet ("ps_key < krs[server].end()") with 3 or 4 servers.
    script = Path(__file__).parent / "scripts" / "big_allreduce.py"
    job = launch("-n", 2, "-s", servers, "--start-timeout", 60, script, tmp_path,
                 *(["fit"] if fit else []))
    assert job.wait(180) == 0, job.err
    results = [json.loads((tmp_path / f"result.{r}.json").read_text()) for r in range(2)]
    for result in results:
        assert all(result["allreduce"].values()), result
    if fit:
        assert results[0]["fit"] == results[1]["fit"]  # the statistics were averaged alike
