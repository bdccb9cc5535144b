"""A worker for benchmarks/network.py: fit a model dominated by one big layer
(Dense(2048) on 1024 inputs: 8 MiB of weights) for EPOCHS epochs; worker 0 prints
`big-layer-samples-per-s S` for the last epoch (all workers' samples).
`big_layer.py EPOCHS [COMPRESSION [SAMPLES]]` (fit's compression=: none, fp16 or 2bit; SAMPLES
in the data set, 512 by default: 4 steps an epoch with 2 workers of 64)."""
from positional import positional

args = positional(__doc__, 1, 3)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import gluondist  # noqa: E402

rs = np.random.RandomState(0)
samples = int(args[2]) if len(args) > 2 else 512
X = rs.rand(samples, 1024).astype(np.float32)
y = rs.randint(0, 10, samples).astype(np.float32)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(2048, activation="relu", in_units=1024), mx.gluon.nn.Dense(10))
history = gluondist.fit(net, (X, y), epochs=int(args[0]), batch_size=64, seed=0,
                        progress=False, optimizer_params={"learning_rate": 0.01},
                        compression=None if args[1:2] in ([], ["none"]) else args[1])
if gluondist.kvstore.rank() == 0:
    print(f"big-layer-samples-per-s {history.history['samples_per_s'][-1]:.1f}", flush=True)
