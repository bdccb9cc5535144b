"""How small gradients are grouped into fused keys (gluondist.kv.fusion), in one process; their
training in a real job, bit-equal to each on its own key: e2e/test_chunk_jobs.py."""
import mxnet as mx

from gluondist.kv.fusion import buckets


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
