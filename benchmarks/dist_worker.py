"""A hand-written dist_sync worker for the benchmarks: `dist_worker.py MODE [STEPS [HIDDEN BATCH]]`.

train: an MLP trained for STEPS steps; rank 0 prints `THROUGHPUT <steps/s>` measured after
warm-up. trivial: join the job and leave. die: rank 1 trains a little, writes the time to
died.<port> and exits 3 while the others keep training. Every step calls
gluondist.heartbeat.beat(), as fit does: a no-op unless launched with --stall-timeout.
"""
import os
import sys
import time

from positional import positional

args = positional(__doc__, 1, 4)

import mxnet as mx  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from gluondist import heartbeat  # noqa: E402

mode = args[0]
steps = int(args[1]) if len(args) > 1 else 200
hidden = int(args[2]) if len(args) > 2 else 256
batch = int(args[3]) if len(args) > 3 else 64
kv = mx.kv.create("dist_sync")
if mode == "trivial":
    sys.exit(0)

net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(hidden, activation="relu"), gluon.nn.Dense(hidden, activation="relu"),
        gluon.nn.Dense(10))
net.initialize(mx.init.Xavier())
x, y = mx.nd.random.uniform(shape=(batch, 128)), mx.nd.random.randint(0, 10, (batch,))
net(x)
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01}, kvstore=kv,
                        update_on_kvstore=False)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def step():
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(batch * kv.num_workers)
    heartbeat.beat()


for _ in range(20):
    step()
mx.nd.waitall()
if mode == "die" and kv.rank == 1:
    with open(f"died.{os.environ['DMLC_PS_ROOT_PORT']}", "w") as f:
        f.write(repr(time.time()))
    sys.exit(3)
start = time.perf_counter()
for _ in range(steps if mode == "train" else 10 ** 9):
    step()
mx.nd.waitall()
if kv.rank == 0:
    print(f"THROUGHPUT {steps / (time.perf_counter() - start):.2f}", flush=True)
