"""gluondist.fit as a user's script: `fit_job.py OUT_DIR EPOCHS BATCH [OPTIONS_JSON]`.

Writes params.<rank>.npz and history.<rank>.json to OUT_DIR. OPTIONS_JSON keys: ckpt
(checkpoint_dir), lr, momentum, clip, schedule (bool), crash_in_epoch (worker 1 raises when
that epoch begins, on a job's first attempt only), optimizer, stop_at ([epoch, batch]: worker 0
asks to stop there), poison ([epoch, batch]: worker 1 sets its output bias to NaN there),
batchnorm (a net with BatchNorm), regression (a regression net, L2 loss, mse/mae metrics; also
writes numpy's val mse/mae of the final net to metrics.<rank>.json), several (the parameter-
server recipe, then fit, then fit again on the same net, then the real fit on a new net),
accumulate (fit's accumulate), grow_at (an epoch: in a job of 2 workers each waits at its
start until the launcher asks them to stop for a grow), batch_sleep (seconds each worker sleeps after each batch, so a
test can act while the job trains), pipeline (M: each worker's net in 2 stages on cpu(0) and
cpu(1), batches in M micro-batches), every (fit's checkpoint_every), kill_at ([epoch, batch]:
worker 1 kills itself with SIGKILL after that batch, on a job's first attempt only), net (a
net of tests/models.py, e.g. convbn, trained on its images instead of the MLP), digits (an MLP
of 4 Dense layers on 640 of scikit-learn's digits), ctx (devices per worker), compression
and sync_batchnorm (fit's), samples (the training samples of the net or the MLP instead of
129), slow_write ([epoch, seconds]: the write of that epoch's checkpoint waits so long before
it writes, on a job's first attempt only: a teardown then comes while it is in flight). The tests import data(), net() and optimizer_params() to
train the same model in one process.
"""
import json
import os
import signal
import sys
import time

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore, recipes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import models  # noqa: E402


def data(opts=None):
    if (opts or {}).get("digits"):
        from sklearn.datasets import load_digits
        X, y = load_digits(return_X_y=True)
        order = np.random.RandomState(0).permutation(len(X))[:840]
        X, y = (X[order] / 16.0).astype(np.float32), y[order].astype(np.float32)
        return (X[:640], y[:640]), (X[640:], y[640:])
    n = (opts or {}).get("samples", 129)  # 129: the last global batch is tiny
    if (opts or {}).get("net"):
        X, y = models.data(opts["net"], n + 50)
        return (X[:n], y[:n]), (X[n:], y[n:])
    rs = np.random.RandomState(0)
    X = rs.rand(n + 50, 8).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * 2 > 1.5).astype(np.float32) + (X[:, 2] > 0.7)
    return (X[:n], y[:n]), (X[n:], y[n:])


def net(opts=None):
    opts = opts or {}
    if opts.get("net"):
        return models.build(opts["net"])
    model = mx.gluon.nn.HybridSequential()
    if opts.get("digits"):
        model.add(mx.gluon.nn.Dense(64, activation="relu"),
                  mx.gluon.nn.Dense(64, activation="relu"),
                  mx.gluon.nn.Dense(32, activation="relu"), mx.gluon.nn.Dense(10))
        return model
    if opts.get("batchnorm"):
        model.add(mx.gluon.nn.Dense(16), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Activation("relu"))
    else:
        model.add(mx.gluon.nn.Dense(16, activation="relu"))
    model.add(mx.gluon.nn.Dense(1 if opts.get("regression") else 3))
    return model


def regression_data():
    rs = np.random.RandomState(1)
    X = rs.rand(931, 8).astype(np.float32)
    y = (X @ rs.rand(8) + 0.1 * rs.randn(931)).astype(np.float32)
    return (X[:600], y[:600]), (X[600:], y[600:])  # 331 validation samples: no batch divides


def optimizer_params(opts):
    params = {"learning_rate": opts.get("lr", 0.2), "momentum": opts.get("momentum", 0.9)}
    if opts.get("clip"):
        params["clip_global_norm"] = opts["clip"]
    if opts.get("schedule"):
        params["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(step=3, factor=0.7)
    return params


class At(gluondist.Callback):
    """Runs ``action(run)`` on worker ``rank`` after batch ``batch`` of ``epoch``."""

    def __init__(self, rank, where, action):
        self.rank, self.where, self.action = rank, tuple(where), action

    def on_batch_end(self, run, batch, logs):
        if run.rank == self.rank and (run.epoch, batch) == self.where:
            self.action(run)


class Sleep(gluondist.Callback):
    def __init__(self, seconds):
        self.seconds = seconds

    def on_batch_end(self, run, batch, logs):
        time.sleep(self.seconds)


def kill_once(run):
    if os.environ.get("GLUONDIST_RESTART_COUNT", "0") == "0":
        os.kill(os.getpid(), signal.SIGKILL)


def stop(run):
    run.stop_training = True


def poison(run):
    bias = run.net[-1].bias
    bias.set_data(bias.data() * np.nan)


class CrashOnce(gluondist.Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_begin(self, run, epoch):
        first_attempt = os.environ.get("GLUONDIST_RESTART_COUNT", "0") == "0"
        if epoch == self.epoch and kvstore.rank() == 1 and first_attempt:
            raise RuntimeError(f"worker 1 crashes in epoch {epoch}")


class WaitForGrow(gluondist.Callback):
    """On a job of 2 workers, each waits at the start of ``epoch`` until the launcher has asked
    it to stop for a grow (so a test's grow never races the end of training)."""

    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_begin(self, run, epoch):
        if epoch != self.epoch or run.num_workers != 2:
            return
        deadline = time.monotonic() + 120
        while not gluondist.elastic.requested():
            if time.monotonic() > deadline:
                raise RuntimeError("the launcher never asked this worker to stop for a grow")
            time.sleep(0.05)


def slow_write(epoch, seconds):
    """The write of ``epoch``'s checkpoint waits ``seconds`` before it writes (a slow disk)."""
    from gluondist import snapshot
    write = snapshot.Snapshot.write

    def slow(self, directory):
        if self.epoch == epoch and self.batch is None:
            time.sleep(seconds)
        return write(self, directory)
    snapshot.Snapshot.write = slow


def main():
    out, epochs, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    if "slow_write" in opts and os.environ.get("GLUONDIST_RESTART_COUNT", "0") == "0":
        slow_write(*opts["slow_write"])
    train, val = regression_data() if opts.get("regression") else data(opts)
    extra = {"loss": mx.gluon.loss.L2Loss(), "metrics": ["mse", "mae"]} \
        if opts.get("regression") else {}
    if opts.get("several"):
        recipes.train_parameter_server(mx.gluon.nn.Dense(3), *train, epochs=1, batch_size=batch)
        warm = net(opts)
        for _ in range(2):  # a fit, then fine-tuning the same net
            gluondist.fit(warm, train, epochs=1, batch_size=batch, seed=3)
    model = net(opts)
    callbacks = [CrashOnce(opts["crash_in_epoch"])] if "crash_in_epoch" in opts else []
    if "stop_at" in opts:
        callbacks.append(At(0, opts["stop_at"], stop))
    if "kill_at" in opts:
        callbacks.append(At(1, opts["kill_at"], kill_once))
    if "poison" in opts:
        callbacks.append(At(1, opts["poison"], poison))
    if "grow_at" in opts:
        callbacks.append(WaitForGrow(opts["grow_at"]))
    if "batch_sleep" in opts:
        callbacks.append(Sleep(opts["batch_sleep"]))
    extra.update({k: opts[k] for k in ("ctx", "compression", "sync_batchnorm") if k in opts})
    if "pipeline" in opts:
        extra.update(ctx=[mx.cpu(0), mx.cpu(1)], parallel="pipeline",
                     micro_batches=opts["pipeline"])
    history = gluondist.fit(model, train, val_data=val, epochs=epochs, batch_size=batch, seed=11,
                            optimizer=opts.get("optimizer", "sgd"),
                            optimizer_params=optimizer_params(opts),
                            checkpoint_dir=opts.get("ckpt"), callbacks=callbacks,
                            accumulate=opts.get("accumulate", 1),
                            checkpoint_every=opts.get("every"), **extra)
    rank = kvstore.rank()
    np.savez(os.path.join(out, f"params.{rank}.npz"), **models.params(model))
    with open(os.path.join(out, f"history.{rank}.json"), "w") as f:
        json.dump(history.history, f)
    if opts.get("regression"):
        err = model(mx.nd.array(val[0])).asnumpy().ravel().astype(np.float64) - val[1]
        with open(os.path.join(out, f"metrics.{rank}.json"), "w") as f:
            json.dump({"mse": float(np.mean(err ** 2)), "mae": float(np.mean(np.abs(err)))}, f)


if __name__ == "__main__":
    main()
