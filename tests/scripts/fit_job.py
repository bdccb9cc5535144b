"""gluondist.fit as a user's script: `fit_job.py OUT_DIR EPOCHS BATCH [OPTIONS_JSON]`.

Writes params.<rank>.npz and history.<rank>.json to OUT_DIR. OPTIONS_JSON keys: ckpt
(checkpoint_dir), lr, momentum, clip, schedule (bool), crash_in_epoch (worker 1 raises when
that epoch begins, on a job's first attempt only), optimizer. The tests import data(), net()
and optimizer_params() to train the same model in one process.
"""
import json
import os
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore


def data():
    rs = np.random.RandomState(0)
    X = rs.rand(179, 8).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * 2 > 1.5).astype(np.float32) + (X[:, 2] > 0.7)
    return (X[:129], y[:129]), (X[129:], y[129:])  # 129: the last global batch is tiny


def net():
    model = mx.gluon.nn.HybridSequential()
    model.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
    return model


def optimizer_params(opts):
    params = {"learning_rate": opts.get("lr", 0.2), "momentum": opts.get("momentum", 0.9)}
    if opts.get("clip"):
        params["clip_global_norm"] = opts["clip"]
    if opts.get("schedule"):
        params["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(step=3, factor=0.7)
    return params


class CrashOnce(gluondist.Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_begin(self, run, epoch):
        first_attempt = os.environ.get("GLUONDIST_RESTART_COUNT", "0") == "0"
        if epoch == self.epoch and kvstore.rank() == 1 and first_attempt:
            raise RuntimeError(f"worker 1 crashes in epoch {epoch}")


def main():
    out, epochs, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    train, val = data()
    model = net()
    callbacks = [CrashOnce(opts["crash_in_epoch"])] if "crash_in_epoch" in opts else []
    history = gluondist.fit(model, train, val_data=val, epochs=epochs, batch_size=batch, seed=11,
                            optimizer=opts.get("optimizer", "sgd"),
                            optimizer_params=optimizer_params(opts),
                            checkpoint_dir=opts.get("ckpt"), callbacks=callbacks)
    rank = kvstore.rank()
    np.savez(os.path.join(out, f"params.{rank}.npz"),
             **{k: p.data().asnumpy() for k, p in model._collect_params_with_prefix().items()})
    with open(os.path.join(out, f"history.{rank}.json"), "w") as f:
        json.dump(history.history, f)


if __name__ == "__main__":
    main()
