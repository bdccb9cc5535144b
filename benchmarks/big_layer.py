"""A worker for benchmarks/network.py: fit a model dominated by one big layer
(Dense(2048) on 1024 inputs: 8 MiB of weights) for EPOCHS epochs; worker 0 prints
`big-layer-samples-per-s S` for the last epoch (all workers' samples).
`big_layer.py EPOCHS [COMPRESSION [SAMPLES]]` (fit's compression=: none, fp16 or 2bit; SAMPLES
in the data set, 512 by default: 4 steps an epoch with 2 workers of 64)."""
import sys

import mxnet as mx
import numpy as np

import gluondist

rs = np.random.RandomState(0)
samples = int(sys.argv[3]) if len(sys.argv) > 3 else 512
X = rs.rand(samples, 1024).astype(np.float32)
y = rs.randint(0, 10, samples).astype(np.float32)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(2048, activation="relu", in_units=1024), mx.gluon.nn.Dense(10))
history = gluondist.fit(net, (X, y), epochs=int(sys.argv[1]), batch_size=64, seed=0,
                        progress=False, optimizer_params={"learning_rate": 0.01},
                        compression=None if sys.argv[2:3] in ([], ["none"]) else sys.argv[2])
if gluondist.kvstore.rank() == 0:
    print(f"big-layer-samples-per-s {history.history['samples_per_s'][-1]:.1f}", flush=True)
