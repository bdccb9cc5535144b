"""fit's rules in a job: `fit_rules_job.py OUT_DIR MODE`.

MODE `shard`: each worker passes its own shard, X[rank::2] of 257 samples (129 against 128),
as the classic recipe does. fit must refuse on every worker before training: each worker
writes the error's message to <rank>.error, the workers meet at a barrier (so both files exist
before either exits) and re-raise it.

MODE `refit`: several fits in a row on one checkpoint_dir, each resuming the previous one and
training one epoch more (a net of about a million parameters, so rank 0's write takes a
while); writes <rank>.done with the number of epochs in the last History.
"""
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


def main():
    out, mode = sys.argv[1], sys.argv[2]
    rs = np.random.RandomState(0)
    X = rs.rand(257, 8).astype(np.float32)
    y = (X[:, 0] * 3).astype(np.int64).astype(np.float32)
    rank, workers = kvstore.rank(), kvstore.num_workers()
    if mode == "shard":
        try:
            gluondist.fit(net(16), (X[rank::workers], y[rank::workers]), epochs=2,
                          batch_size=16, seed=1)
        except ValueError as exc:
            with open(os.path.join(out, f"{rank}.error"), "w") as f:
                f.write(str(exc))
            kvstore.barrier()
            raise
        return
    ckpt = os.path.join(out, "ckpt")
    model = net(4096)
    for epochs in range(1, 6):
        history = gluondist.fit(model, (X, y), epochs=epochs, batch_size=16, seed=1,
                                checkpoint_dir=ckpt)
    with open(os.path.join(out, f"{rank}.done"), "w") as f:
        f.write(str(len(history.history["loss"])))


if __name__ == "__main__":
    main()
