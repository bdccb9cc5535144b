"""A worker for benchmarks/network.py: fit a model dominated by one big layer
(Dense(2048) on 1024 inputs: 8 MiB of weights) for EPOCHS epochs; worker 0 prints
`big-layer-samples-per-s S` for the last epoch (all workers' samples).
`big_layer.py EPOCHS [COMPRESSION]` (fit's compression=: none, fp16 or 2bit)."""
import sys

import mxnet as mx
import numpy as np

import gluondist

rs = np.random.RandomState(0)
X = rs.rand(512, 1024).astype(np.float32)
y = rs.randint(0, 10, 512).astype(np.float32)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(2048, activation="relu", in_units=1024), mx.gluon.nn.Dense(10))
history = gluondist.fit(net, (X, y), epochs=int(sys.argv[1]), batch_size=64, seed=0,
                        progress=False, optimizer_params={"learning_rate": 0.01},
                        compression=None if sys.argv[2:] in ([], ["none"]) else sys.argv[2])
if gluondist.kvstore.rank() == 0:
    print(f"big-layer-samples-per-s {history.history['samples_per_s'][-1]:.1f}", flush=True)
