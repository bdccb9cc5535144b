"""fit(parallel='pipeline'): stages on CPU contexts end where one context ends (relative 1e-5),
and the rest of fit keeps working: metrics, validation, callbacks, evaluate and predict,
checkpoints that move between the layouts, accumulation, sample weights and clipping."""
import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import parallel
from conftest import OPT
from conftest import params_of

TWO = [mx.cpu(0), mx.cpu(1)]


def deep():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(32, activation="tanh"), mx.gluon.nn.Dense(24, activation="tanh"),
            mx.gluon.nn.Dense(16, activation="tanh"), mx.gluon.nn.Dense(10))
    return net


def train(data, ctx, epochs=2, **kw):
    """A fresh net (seed 7 draws the same initial weights), fit on ``ctx``."""
    net = deep()
    kw.setdefault("optimizer_params", OPT)
    history = gluondist.fit(net, data, epochs=epochs, batch_size=kw.pop("batch_size", 30),
                            seed=7, ctx=ctx, progress=False, **kw)
    return net, history


def assert_close(a, b):
    pa, pb = params_of(a), params_of(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        np.testing.assert_allclose(pb[k], pa[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.fixture
def few(digits):
    X, y = digits
    return (X[:170], y[:170]), (X[170:230], y[170:230])  # 170: a short last batch


@pytest.mark.parametrize("ctxs, micro", [(TWO, 1), (TWO, 4), ([mx.cpu(i) for i in range(3)], 2)])
def test_pipeline_ends_where_one_context_ends(few, ctxs, micro):
    train_data, val = few
    one, h1 = train(train_data, mx.cpu(0), val_data=val)
    net, h2 = train(train_data, ctxs, val_data=val, parallel="pipeline", micro_batches=micro)
    assert_close(one, net)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(h2.history[key], h1.history[key], rtol=1e-5, err_msg=key)
    stages = {str(p.list_ctx()[0]) for p in net.collect_params().values()}
    assert stages == {str(c) for c in ctxs}  # every stage has its own device
    assert all(len(p.list_ctx()) == 1 for p in net.collect_params().values())


def test_accumulation_weights_and_clipping_alike(few):
    (X, y), _ = few
    w = np.linspace(0.5, 2.0, len(X)).astype(np.float32)
    kw = dict(accumulate=2, optimizer_params=dict(OPT, clip_global_norm=0.5), epochs=1)
    one, _ = train((X, y, w), mx.cpu(0), **kw)
    net, _ = train((X, y, w), TWO, parallel="pipeline", micro_batches=3, stages=[1], **kw)
    assert_close(one, net)
    assert [p.list_ctx() for p in net[0].collect_params().values()] == [[mx.cpu(0)]] * 2


def test_evaluate_and_predict_after_a_pipeline(few):
    train_data, val = few
    net, h = train(train_data, TWO, epochs=1, val_data=val, parallel="pipeline",
                   micro_batches=2)
    pipe = parallel.Pipeline(net, TWO)  # the stages as fit left them: nothing moves
    scores = gluondist.evaluate(pipe, val)
    assert scores["loss"] == pytest.approx(h.history["val_loss"][-1], rel=1e-5)
    assert [p.list_ctx() for p in net[3].collect_params().values()] == [[mx.cpu(1)]] * 2
    out = gluondist.predict(pipe, val[0])
    assert out.shape == (60, 10)
    np.testing.assert_allclose(gluondist.predict(net, val[0]), out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("first, then", [
    (dict(ctx=TWO, parallel="pipeline", micro_batches=2), dict(ctx=mx.cpu(0))),
    (dict(ctx=mx.cpu(0)), dict(ctx=TWO, parallel="pipeline", micro_batches=2)),
])
def test_a_checkpoint_resumes_in_the_other_layout(few, tmp_path, first, then):
    train_data, _ = few
    opt = dict(optimizer="adam", optimizer_params={"learning_rate": 0.01})
    whole, _ = train(train_data, mx.cpu(0), epochs=2, **opt)
    first, then = dict(first), dict(then)
    train(train_data, first.pop("ctx"), epochs=1, checkpoint_dir=tmp_path, **opt, **first)
    resumed, h = train(train_data, then.pop("ctx"), epochs=2, checkpoint_dir=tmp_path, **opt,
                       **then)
    assert len(h.history["loss"]) == 2
    assert_close(whole, resumed)


@pytest.mark.parametrize("kw, message", [
    (dict(micro_batches=2), r"^micro_batches and stages split a net into a pipeline: pass "
                            r"parallel='pipeline'"),
    (dict(parallel="pipeline", micro_batches=31), r"^micro_batches=31 exceeds the batch of 30"),
    (dict(parallel="pipeline", stages=[9]), r"^stages=\[9\]: give 1 increasing child indices"),
])
def test_fit_refuses_in_one_line(few, kw, message):
    with pytest.raises(ValueError, match=message) as err:
        train(few[0], TWO, **kw)
    assert "\n" not in str(err.value)


def test_the_pipeline_pages_blocks_run(capsys):
    from docpages import blocks
    namespace = {}
    ran = [b for b in blocks("docs/pipeline.md") if b.mark is None]
    for i, b in enumerate(ran):
        exec(compile(b.code, f"docs/pipeline.md block {i}", "exec"), namespace)
    assert len(ran) == 3
    net = namespace["net"]
    assert [str(net[i].weight.list_ctx()) for i in range(4)] == ["[cpu(0)]"] * 2 + ["[cpu(1)]"] * 2
    assert len(namespace["history"].history["loss"]) == 2
    held = namespace["pipe2"].param_bytes()
    assert set(held) == {"cpu(0)", "cpu(1)"} and all(held.values())
    assert "'accuracy'" in capsys.readouterr().out


def test_dist_async_is_refused_before_the_job_is_joined(few, monkeypatch):
    """dist_async runs the optimizer on the servers; a pipeline updates on the workers (the
    mode is faked here: outside a job MXNet would wait for a scheduler)."""
    from gluondist.kv.kinds import Mode
    from gluondist.training import config
    monkeypatch.setattr(config.kvs, "resolve_mode", lambda kind, copies: Mode("dist_async"))
    with pytest.raises(ValueError, match=r"^parallel='pipeline' updates on the workers; kvstore "
                                         r"'dist_async' runs the optimizer on the servers: use "
                                         r"dist_sync$"):
        train(few[0], TWO, parallel="pipeline")
