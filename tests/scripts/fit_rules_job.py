"""fit's rules in a job: `fit_rules_job.py OUT_DIR MODE`.

MODE `shard`: each worker passes its own shard, X[rank::2] of 257 samples (129 against 128),
as the classic recipe does. evaluate, then fit with epochs, seeds or learning rates differing
by rank, then fit on shards of equal size (128 each), then fit on the shards must each be
refused on every worker before any batch: each worker writes the message to <rank>.evaluate,
<rank>.epochs, <rank>.seed, <rank>.lr, <rank>.evenshard and <rank>.error, meeting the others
at a barrier after each (so every file exists before any worker exits), and re-raises the
last.

MODE `refit` [ROUNDS]: several fits in a row on one checkpoint_dir, each resuming the previous
one and training one epoch more (a net of about a million parameters, so rank 0's write takes a
while); writes <rank>.done with the epoch each fit resumed at (JSON), which must be 0, 1, 2 …
on every worker. ROUNDS (default 1) repeats that on a new net and checkpoint_dir each, in the
same job: <rank>.done then holds one such list per round.
"""
import json
import os
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore


def net(hidden):
    model = mx.gluon.nn.HybridSequential()
    model.add(mx.gluon.nn.Dense(hidden, activation="relu"), mx.gluon.nn.Dense(3))
    return model


def refused(out, name, call, reraise=False):
    """Run ``call``, which must raise ValueError; write its message to <rank>.<name> and meet
    the other workers (so that every worker's file exists before any exits)."""
    try:
        call()
    except ValueError as exc:
        with open(os.path.join(out, f"{kvstore.rank()}.{name}"), "w") as f:
            f.write(str(exc))
        kvstore.barrier()
        if reraise:
            raise
        return
    raise AssertionError(f"{name}: not refused")


def main():
    out, mode = sys.argv[1], sys.argv[2]
    rs = np.random.RandomState(0)
    X = rs.rand(257, 8).astype(np.float32)
    y = (X[:, 0] * 3).astype(np.int64).astype(np.float32)
    rank, workers = kvstore.rank(), kvstore.num_workers()
    if mode == "shard":
        shard = (X[rank::workers], y[rank::workers])
        model = net(16)
        model.initialize()
        model(mx.nd.ones((1, 8)))
        refused(out, "evaluate", lambda: gluondist.evaluate(model, shard))
        refused(out, "epochs", lambda: gluondist.fit(net(16), (X, y), epochs=2 + rank, seed=1))
        refused(out, "seed", lambda: gluondist.fit(net(16), (X, y), epochs=2, seed=rank))
        lr = {"learning_rate": 0.1 * (1 + rank)}
        refused(out, "lr", lambda: gluondist.fit(net(16), (X, y), epochs=2, seed=1,
                                                 optimizer_params=lr))
        even = (X[:256][rank::workers], y[:256][rank::workers])  # 128 each: equal counts
        refused(out, "evenshard", lambda: gluondist.fit(net(16), even, epochs=2, seed=1))
        refused(out, "error", lambda: gluondist.fit(net(16), shard, epochs=2, batch_size=16,
                                                    seed=1), reraise=True)
        return
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    done = []
    for round_ in range(rounds):
        ckpt = os.path.join(out, f"ckpt{round_}" if round_ else "ckpt")
        model, starts = net(4096), Starts()
        for epochs in range(1, 6):
            gluondist.fit(model, (X, y), epochs=epochs, batch_size=16, seed=1,
                          checkpoint_dir=ckpt, callbacks=[starts],
                          optimizer_params={"learning_rate": 0.05})
        done.append(starts.starts)
    with open(os.path.join(out, f"{rank}.done"), "w") as f:
        json.dump(done if rounds > 1 else done[0], f)


class Starts(gluondist.Callback):
    """The epoch each fit resumed at."""

    def __init__(self):
        self.starts = []

    def on_train_begin(self, run):
        self.starts.append(run.start)


if __name__ == "__main__":
    main()
