"""evaluate and predict: the same figures as fit, outputs in sample order, errors in
our words."""
import mxnet as mx
import numpy as np
import pytest

import gluondist

from conftest import fit_mlp, mlp


@pytest.mark.parametrize("ctx", [1, 2])
def test_evaluate_right_after_fit_gives_its_last_validation_figures(small, ctx):
    metrics = lambda: ["acc", mx.metric.TopKAccuracy(3)]
    net, h = fit_mlp(small[0], val_data=small[1], ctx=ctx, metrics=metrics())
    figures = gluondist.evaluate(net, small[1], metrics=metrics(), ctx=ctx)
    assert set(figures) == {"loss", "accuracy", "top_k_accuracy_3"}
    for key, value in figures.items():
        assert value == pytest.approx(h.history[f"val_{key}"][-1], rel=1e-6), key


def test_predict_returns_outputs_in_sample_order(small):
    net, h = fit_mlp(small[0], val_data=small[1])
    out = gluondist.predict(net, small[1][0], batch_size=64, ctx=2)
    assert isinstance(out, np.ndarray) and out.shape == (200, 10)
    accuracy = (out.argmax(axis=1) == small[1][1]).mean()
    assert accuracy == pytest.approx(h.history["val_accuracy"][-1], abs=1e-9)
    assert np.allclose(out, net(mx.nd.array(small[1][0])).asnumpy(), atol=1e-5)
    with pytest.raises(ValueError, match="no parameters yet"):
        gluondist.predict(mlp(), small[1][0])
    fresh = mlp()
    fresh.initialize()  # deferred: the shapes come with the first batch, as in MXNet
    out = gluondist.predict(fresh, small[1][0], ctx=2)
    assert out.shape == (200, 10)
    assert np.allclose(out, fresh(mx.nd.array(small[1][0])).asnumpy(), atol=1e-5)


def test_predict_errors_are_in_our_words(small):
    net, _ = fit_mlp(small[0], epochs=1)
    with pytest.raises(ValueError, match=r"net cannot take the inputs given to predict .* "
                                         r"give predict X alone, not \(X, y\)"):
        gluondist.predict(net, small[0])
    with pytest.raises(ValueError, match="net cannot take the inputs given to predict "
                                         r"\(shape \(256, 3\)\): .*"):
        gluondist.predict(net, small[0][0][:, :3])
