"""A dist_sync job with one big layer (1.07 MiB of weights, 2 chunks at the default size):
`chunked_job.py OUT_DIR [CHUNK_BYTES ...]`. Trains it with fit, then a second net with a second
fit (whose keys come after the first's chunks), and worker 0 writes both nets' parameters to
OUT_DIR/params.npz. GLUONDIST_CHUNK_BYTES, set by the test, picks the chunking. Given
CHUNK_BYTES values, the two fits run once per value in this one process, with
GLUONDIST_CHUNK_BYTES set to it (each pair's keys after those of the pairs before), and each
pair's parameters go to OUT_DIR/params.<value>.npz.
"""
import os
import sys

import mxnet as mx
import numpy as np

import gluondist

out, chunks = sys.argv[1], sys.argv[2:]
rs = np.random.RandomState(0)
X = rs.rand(96, 256).astype(np.float32)
y = rs.randint(0, 10, 96).astype(np.float32)


def net():
    model = mx.gluon.nn.HybridSequential()
    model.add(mx.gluon.nn.Dense(1100, activation="relu", in_units=256), mx.gluon.nn.Dense(10))
    return model


def two_fits():
    arrays = {}
    for run in range(2):
        model = net()
        gluondist.fit(model, (X, y), epochs=2, batch_size=16, seed=run, progress=False,
                      optimizer_params={"learning_rate": 0.05, "momentum": 0.9})
        for name, p in model._collect_params_with_prefix().items():  # "0.weight": no counter
            arrays[f"{run}.{name}"] = p.data().asnumpy()
    return arrays


for chunk in chunks or [None]:
    if chunk is not None:
        os.environ["GLUONDIST_CHUNK_BYTES"] = chunk
    arrays = two_fits()
    if gluondist.kvstore.rank() == 0:
        name = "params.npz" if chunk is None else f"params.{chunk}.npz"
        np.savez(os.path.join(out, name), **arrays)
