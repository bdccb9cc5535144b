"""fit with a compression registered in one module (exact_wire.py): `registered_wire_job.py
OUT_DIR`. Each worker trains the same net three times in one dist_sync job: without
compression, with compression='exact' (every gradient whole), and with 'exact' in 4 KiB chunks;
worker 0 writes OUT_DIR/result.npz (each run's parameters) and OUT_DIR/result.json (how many
arrays the exact wire staged)."""
import json
import os
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore

from exact_wire import Exact

out = sys.argv[1]
rs = np.random.RandomState(0)
X = rs.rand(64, 40).astype(np.float32)
y = rs.randint(0, 5, 64).astype(np.float32)
arrays = {}


def train(tag, compression, chunk):
    os.environ["GLUONDIST_CHUNK_BYTES"] = chunk
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(64, activation="relu", in_units=40), mx.gluon.nn.Dense(5))
    gluondist.fit(net, (X, y), epochs=2, batch_size=8, seed=3, progress=False,
                  optimizer_params={"learning_rate": 0.05, "momentum": 0.9},
                  compression=compression)
    for name, p in net._collect_params_with_prefix().items():
        arrays[f"{tag}.{name}"] = p.data().asnumpy()


train("none", None, "0")
train("exact", "exact", "0")
whole = Exact.staged
train("chunked", "exact", "4096")
if kvstore.rank() == 0:
    np.savez(os.path.join(out, "result.npz"), **arrays)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"whole": whole, "chunked": Exact.staged - whole}, f)
