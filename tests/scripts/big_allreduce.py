"""Sums vectors of every size class over the job with kvstore.allreduce and writes what each
worker got: `big_allreduce.py OUT_DIR [fit]`. With `fit`, then trains a Dense(60001) +
BatchNorm net (120,002 BatchNorm statistics, averaged through allreduce) for one epoch."""
import json
import os
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore

LENGTHS = (1, 7, kvstore.REDUCE_CHUNK, kvstore.REDUCE_CHUNK + 1, 107_665, 120_002)

out = sys.argv[1]
kv = kvstore.create("dist_sync")
rank, workers = kv.rank, kv.num_workers
ok = {}
for n in LENGTHS:
    mine = (rank + 1) * np.arange(n, dtype=np.float64) + rank
    want = sum((r + 1) * np.arange(n, dtype=np.float64) + r for r in range(workers))
    ok[n] = bool(np.array_equal(kvstore.allreduce(mine), want))
result = {"allreduce": ok}
if "fit" in sys.argv[2:]:
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(60001, in_units=4), mx.gluon.nn.BatchNorm(in_channels=60001),
            mx.gluon.nn.Dense(2, in_units=60001))
    rs = np.random.RandomState(0)
    X, y = rs.rand(16, 4).astype(np.float32), rs.randint(0, 2, 16).astype(np.float32)
    history = gluondist.fit(net, (X, y), epochs=1, batch_size=4, seed=0, progress=False)
    result["fit"] = {"loss": history.history["loss"],
                     **{k: p.data().asnumpy().tolist()
                        for k, p in net[1].collect_params().items() if "running" in k}}
with open(os.path.join(out, f"result.{rank}.json"), "w") as f:
    json.dump(result, f)
