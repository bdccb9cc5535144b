"""Big gradients travel in chunks: views of the arrays on keys of their own, staged per
device, the same numbers as whole, in one process (a real job: e2e/test_chunk_jobs.py)."""
import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import _mx
from gluondist.kv.exchange import Exchange
from gluondist.kv.staging import Staging
from gluondist.kv.updates import Updates
from gluondist.trees import Kept
from gluondist.kvstore import CHUNK_BYTES, chunk_bounds, parameter_chunks

from conftest import ROOT, run_cli


def test_chunk_bounds():
    assert chunk_bounds(10, 4, 16) == [(0, 3), (3, 6), (6, 10)]
    assert chunk_bounds(9, 4, 12) == [(0, 3), (3, 6), (6, 9)]
    assert chunk_bounds(10, 4, 40) == [(0, 10)]
    assert chunk_bounds(10, 4, 0) == [(0, 10)]
    assert chunk_bounds(3, 4, 2) == [(0, 1), (1, 2), (2, 3)]  # below one element: one each
    # 0.54 MiB of float32 at the default size (512 KiB): two chunks, each below MXNet's
    # big-array bound
    assert chunk_bounds(128 * 1100, 4, CHUNK_BYTES) == [(0, 70400), (70400, 140800)]


def test_parameter_chunks_follow_dtype_and_leave_sparse_whole():
    dense = mx.gluon.Parameter("w", shape=(200, 1000), dtype="float16")
    assert len(parameter_chunks(dense, CHUNK_BYTES)) == 1  # 400,000 bytes
    dense64 = mx.gluon.Parameter("w", shape=(200, 1000), dtype="float64")
    assert len(parameter_chunks(dense64, CHUNK_BYTES)) == 4  # 1.6 MB
    sparse = mx.gluon.Parameter("e", shape=(1000, 1000), stype="row_sparse",
                                grad_stype="row_sparse")
    assert parameter_chunks(sparse, 1024) == [(0, 1000000)]


def exchange(shapes, chunks, staging=None, devices=1, offset=0):
    """An exchange of parameters of ``shapes`` (zeros) through a real (local) kvstore."""
    params = [mx.gluon.Parameter(f"p{i}", shape=s) for i, s in enumerate(shapes)]
    for p in params:
        p.initialize(mx.init.Zero(), ctx=[mx.cpu(d) for d in range(devices)])
    ex = Exchange(params, Updates(params, mx.optimizer.SGD()), mx.kv.create("local"),
                  offset=offset, chunks=chunks, staging=staging)
    ex.join()
    return ex, params


def test_a_chunked_exchange_moves_the_same_numbers_as_a_whole_one():
    """One chunked and one whole parameter, two devices."""
    shapes = [(4, 5), (3,)]
    results = []
    for chunks, staging, offset in (([[(0, 20)], [(0, 3)]], None, 0),
                                    ([chunk_bounds(20, 4, 24), [(0, 3)]], Staging(2, 6), 7)):
        ex, params = exchange(shapes, chunks, staging, devices=2, offset=offset)
        for d, ctx in enumerate(params[0].list_ctx()):
            params[0].grad(ctx)[:] = mx.nd.arange(20).reshape(shapes[0]) * (d + 1)
            params[1].grad(ctx)[:] = d + 1
        ex.reduce()  # in place, as a step does
        results.append([g.asnumpy() for p in params for g in p.list_grad()])
    for a, b in zip(*results):
        assert np.array_equal(a, b)
    assert np.array_equal(results[1][0], np.arange(20).reshape(shapes[0]) * 3)
    assert np.array_equal(results[1][2], [3, 3, 3])


@pytest.mark.parametrize("slots", [0, 1, 2])
def test_one_devices_chunks_travel_through_staging_arrays_and_land_in_place(slots):
    ex, (param,) = exchange([(4, 5)], [chunk_bounds(20, 4, 24)], Staging(slots, 5))
    param.grad()[:] = mx.nd.arange(20).reshape((4, 5))
    ex.reduce()  # one device: staged
    assert np.array_equal(param.grad().asnumpy(), np.arange(20).reshape((4, 5)))
    # bounded: the 4 chunks share the slots' arrays; unbounded: one per chunk, kept
    assert sorted(s for s, *_ in ex.staging._arrays) == (
        list(range(slots)) if slots else [("key", k) for k in range(4)])
    param.grad()[:] *= 2
    ex.reduce()
    assert np.array_equal(param.grad().asnumpy(), np.arange(20).reshape((4, 5)) * 2)
    assert len(ex.staging._arrays) == (slots or 4)


def test_several_devices_chunks_are_staged_per_device():
    # a view counts as its whole array for MXNet's engine, on every device: each device's part
    # of a chunk gets a staging array, so chunk k's pull need not wait for chunk k+1's push
    ex, (param,) = exchange([(4, 5)], [chunk_bounds(20, 4, 24)], Staging(2, 5), devices=2)
    for d, grad in enumerate(param.list_grad()):
        grad[:] = mx.nd.arange(20).reshape((4, 5)) * (d + 1)
    ex.reduce()
    for g in param.list_grad():
        assert np.array_equal(g.asnumpy(), np.arange(20).reshape((4, 5)) * 3)
    assert sorted((s, d) for s, d, *_ in ex.staging._arrays) == [(0, 0), (0, 1), (1, 0),
                                                                  (1, 1)]


def test_prepared_calls_copy_and_pushpull_as_mxnet_does_and_follow_new_arrays():
    """gluondist._mx's C calls, made with arguments built once, give what copyto and pushpull
    give; a call kept under a name is made again when its arrays change."""
    kept, kv = Kept(), mx.kv.create("local")
    copy = lambda name, src, dst: kept.get(name, (src, dst), lambda: _mx.Copy(src, dst))()
    src, dst = mx.nd.arange(6), mx.nd.zeros(6)
    copy("c", src, dst)
    assert np.array_equal(dst.asnumpy(), np.arange(6))
    src *= 2  # the same arrays: the same call, the new values
    copy("c", src, dst)
    assert np.array_equal(dst.asnumpy(), np.arange(6) * 2)
    other = mx.nd.ones((2, 3))[1]  # a view, as chunks are
    copy("c", other, dst[:3])
    assert np.array_equal(dst.asnumpy(), [1, 1, 1, 6, 8, 10])
    kv.init(3, mx.nd.zeros(4))
    pushpull = lambda name, key, parts, priority: kept.get(
        name, parts, lambda: _mx.PushPull(kv, key, parts))(priority)
    parts = [mx.nd.arange(4), mx.nd.arange(4) * 10]  # two devices' arrays: summed, in place
    pushpull("p", 3, parts, 0)
    for part in parts:
        assert np.array_equal(part.asnumpy(), np.arange(4) * 11)
    fresh = [mx.nd.ones(4)]
    pushpull("p", 3, fresh, -1)
    assert np.array_equal(fresh[0].asnumpy(), np.ones(4))
    with pytest.raises(mx.base.MXNetError):  # MXNet's error, raised, for a key never made
        pushpull("q", 99, fresh, 0)
        mx.nd.waitall()


BAD = {"GLUONDIST_CHUNK_BYTES": ("1MB", "1e6", "", "-5", "4", " 2048", "+2048", "2_048"),
       "GLUONDIST_FUSE_BYTES": ("64k", "", "-1", "1000", "1_024"),
       "GLUONDIST_CHUNKS_IN_FLIGHT": ("two", "1.5", "", "-1", " 2 ", "+3", "1_0", "\u0662")}
WANT = {"GLUONDIST_CHUNK_BYTES": "bytes, at least 1024 (such as 524288), or 0 to send every "
                                 "array whole",
        "GLUONDIST_FUSE_BYTES": "bytes, at least 1024 (such as 524288), or 0 to send each "
                                "small gradient on its own key",
        "GLUONDIST_CHUNKS_IN_FLIGHT": "chunks per server (such as 2), or 0 for no bound"}


@pytest.mark.parametrize("name,text", [(n, t) for n, texts in BAD.items() for t in texts])
def test_a_chunking_variable_that_is_not_a_whole_number_is_one_line(monkeypatch, name, text):
    # in any process, with any kvstore (fit here runs without one)
    monkeypatch.setenv(name, text)
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize()
    with pytest.raises(ValueError) as raised:
        gluondist.fit(net, (np.ones((8, 3), "f"), np.zeros(8, "f")), progress=False)
    assert str(raised.value) == f"{name}={text!r}: give a whole number of {WANT[name]}"


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_launcher_refuses_a_bad_chunking_variable_before_any_process_starts(name):
    proc = run_cli("launch", "-n", 2, "-s", 1, "--env", f"{name}=two", "--dry-run",
                   ROOT / "examples" / "digits.py")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"gluondist: error: {name}='two': give a whole number of " \
        f"{WANT[name]}\n"


def test_chunks_are_views_of_the_gradient():
    ex, _ = exchange([(2, 5)], [chunk_bounds(10, 4, 16)])
    grad = mx.nd.zeros((2, 5))
    keys, views = ex._keyed(0, [grad])
    assert keys == [0, 1, 2]
    views[1][0][:] = 7  # writing a chunk writes the gradient itself
    assert grad.asnumpy().ravel().tolist() == [0, 0, 0, 7, 7, 7, 0, 0, 0, 0]
