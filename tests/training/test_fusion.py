"""How small gradients are grouped into fused keys (gluondist.kv.fusion), in one process; their
training in a real job, bit-equal to each on its own key: e2e/test_chunk_jobs.py."""
import itertools

import mxnet as mx
import numpy as np
import pytest

from gluondist.kv.chunks import SERVER_HASH
from gluondist.kv.exchange import Exchange
from gluondist.kv.fusion import buckets
from gluondist.kv.staging import Staging
from gluondist.kv.updates import Updates


def params(*specs):
    """Initialised Parameters of (elements, dtype, contexts) each."""
    made = []
    for i, (size, dtype, ctxs) in enumerate(specs):
        p = mx.gluon.Parameter(f"p{i}", shape=(size,), dtype=dtype)
        p.initialize(ctx=ctxs)
        made.append(p)
    return made


def groups(found):
    return [(b.key, b.members, b.bounds) for b in found]


ONE, TWO = [mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]


def test_consecutive_small_gradients_share_a_key_cut_at_the_capacity():
    ps = params(*[(100, "float32", ONE)] * 5)  # 400 bytes each
    found = buckets(ps, [[(0, 0)]] * 5, [10, 11, 12, 13, 14], 1200, [True] * 5)
    assert groups(found) == [(10, [0, 1, 2], [(0, 100), (100, 200), (200, 300)]),
                             (13, [3, 4], [(0, 100), (100, 200)])]


def test_a_run_breaks_at_what_cannot_join_it():
    ps = params((10, "float32", ONE), (10, "float32", ONE),  # a pair
                (10, "float16", ONE), (10, "float32", ONE),  # another dtype: alone, alone
                (10, "float32", TWO), (10, "float32", TWO),  # other devices: a pair
                (10, "float32", TWO),  # chunked
                (10, "float32", TWO), (10, "float32", TWO),  # the second not trained
                (10, "float32", ONE))  # alone at the end
    chunks = [[(0, 0)]] * 6 + [[(0, 5), (5, 10)]] + [[(0, 0)]] * 3
    eligible = [True] * 8 + [False, True]
    found = buckets(ps, chunks, list(range(100, 110)), 1 << 19, eligible)
    assert [(b.key, b.members) for b in found] == [(100, [0, 1]), (104, [4, 5])]
    assert found[1].contexts == TWO and found[0].dtype == "float32"


def test_nothing_is_fused_at_capacity_zero_or_past_it():
    ps = params((10, "float32", ONE), (10, "float32", ONE))
    assert buckets(ps, [[(0, 0)]] * 2, [0, 1], 0, [True] * 2) == []
    assert buckets(ps, [[(0, 0)]] * 2, [0, 1], 39, [True] * 2) == []  # 40 bytes each


def test_dtypes_spelled_either_way_fuse_together():
    ps = params((10, "float32", ONE), (10, "float32", ONE))
    ps[1].dtype = np.float32  # as Conv2D and BatchNorm keep it; Dense keeps "float32"
    assert [b.members for b in buckets(ps, [[(0, 0)]] * 2, [0, 1], 1 << 19, [True] * 2)] \
        == [[0, 1]]


def test_buckets_spread_over_the_servers_as_chunks_do():
    # 16 runs of 8 arrays: each run's first key is a multiple of 8, all on server 0 of 4
    ps = params(*[(100, "float32", ONE)] * 128)
    found = buckets(ps, [[(0, 0)]] * 128, list(range(128)), 3200, [True] * 128, servers=4)
    assert [len(b.members) for b in found] == [8] * 16
    assert sorted((b.key * SERVER_HASH) % 4 for b in found) == [0] * 4 + [1] * 4 + [2] * 4 \
        + [3] * 4
    assert all(b.key in b.members for b in found)  # a key of its own members: never another's


def fused_sum(fuse_bytes, devices):
    """Gradients of three small parameters on ``devices``, summed by a local kvstore through an
    exchange: the sums, and the exchange."""
    ps = [mx.gluon.Parameter(f"q{i}", shape=(3, i + 2)) for i in range(3)]
    for p in ps:
        p.initialize(mx.init.Zero(), ctx=devices)
    ex = Exchange(ps, Updates(ps, mx.optimizer.SGD()), mx.kv.create("local"),
                  fuse_bytes=fuse_bytes)
    ex.join()
    for d, p in itertools.product(range(len(devices)), ps):
        p.list_grad()[d][:] = mx.nd.array(np.random.RandomState(d).rand(*p.shape))
    ex.reduce()
    return [g.asnumpy() for p in ps for g in p.list_grad()], ex


def test_a_fused_exchange_sums_what_keys_of_their_own_sum_and_refuses_a_move():
    alone, _ = fused_sum(0, TWO)
    fused, ex = fused_sum(4096, TWO)
    assert [b.members for b in ex.buckets] == [[0, 1, 2]]
    assert all(np.array_equal(a, b) for a, b in zip(alone, fused))
    ex.params[1].reset_ctx(ONE)  # a bucket's flat arrays are per device, made at join
    with pytest.raises(ValueError, match=r"parameters q1 moved to other devices or another "
                                         r"dtype after make_trainer; make a new trainer"):
        ex.reduce()


def test_parameters_not_trained_are_passed_over_not_a_break():
    # a BatchNorm's running statistics between two layers' weights are never sent at a step
    ps = params(*[(10, "float32", ONE)] * 4)
    ps[1].grad_req = ps[2].grad_req = "null"
    eligible = [p.grad_req != "null" for p in ps]
    found = buckets(ps, [[(0, 0)]] * 4, [0, 1, 2, 3], 1 << 19, eligible)
    assert [(b.members, b.bounds) for b in found] == [([0, 3], [(0, 10), (10, 20)])]


def test_gradients_are_issued_in_the_order_backward_makes_them():
    """The last parameter's first (the reverse of the net's order), so each is pushed while
    backward still makes the ones before it; fused buckets when their first-made member is."""
    ps = [mx.gluon.Parameter(f"r{i}", shape=(40,) if i == 2 else (3,)) for i in range(4)]
    for p in ps:
        p.initialize(mx.init.Zero(), ctx=[mx.cpu(0)])
    ex = Exchange(ps, Updates(ps, mx.optimizer.SGD()), mx.kv.create("local"),
                  chunks=[[(0, 0)], [(0, 0)], [(0, 20), (20, 40)], [(0, 0)]],
                  staging=Staging(0, 0))
    ex.join()
    sent = []
    ex._send = lambda key, values, out, priority, name: sent.append(key)
    ex.reduce()
    assert sent == [ex.keys(3)[0], *ex.keys(2), ex.keys(1)[0], ex.keys(0)[0]]
