"""The order gradients are sent in (gluondist.kv.order), in one dist_sync job:
`order_job.py OUT_DIR`. Trains ResNet-18 v1 (BatchNorm) with fit and with a loop of one's own
(make_trainer), an LSTM language model and an MLP with fit, 5 steps each, in chunks of 16 KiB
(the LSTM's 4 KiB) so that every net has chunked gradients: first in backward's order
throughout (no step timed), then as the job chooses (steps 3 and 4 timed), with the head set
to 40% of the chunked bytes after the measurement, so that the steps after it send in the
mixed order whatever this machine measured. Worker 0 writes each run's arrays to
OUT_DIR/params.<run>.npz, and every worker the heads it measured (one line a trainer) to
OUT_DIR/heads.<run>.<rank> and the parameters each trainer's last step issued, in the order
it issued them (a fused bucket as its first member), to OUT_DIR/issued.<run>.<rank>.json.
"""
import json
import os
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist.kv import order
from gluondist.kv.exchange import Exchange

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import models  # noqa: E402

out = sys.argv[1]
STEPS, MIXED = 5, 0.4


def mlp_fit():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(80, activation="relu"), mx.gluon.nn.Dense(80, activation="relu"),
            mx.gluon.nn.Dense(models.CLASSES))  # two weights cut in chunks
    rs = np.random.RandomState(3)
    X = rs.rand(8 * 2 * STEPS, 100).astype(np.float32)
    y = rs.randint(0, models.CLASSES, len(X)).astype(np.float32)
    gluondist.fit(net, (X, y), epochs=1, batch_size=8, seed=5, progress=False,
                  optimizer_params=dict(models.OPTIMIZER))
    return net


measured_heads = []
issued = []  # the parameters each step of the current trainer issued, in order
timed, pushpull, fused = order.Order.timed, Exchange._pushpull, Exchange._fused
reduce = Exchange.reduce


def timed_then_mixed(self, trained):
    timed(self, trained)  # the real measurement; after the last timed step every worker's
    if self.head is not None:
        measured_heads.append(self.head)
        self.head = MIXED


def reduce_recorded(self, *args, **kwargs):
    issued.append([])
    reduce(self, *args, **kwargs)


def pushpull_recorded(self, index, *args):
    issued[-1].append(index)
    pushpull(self, index, *args)


def fused_recorded(self, bucket):
    issued[-1].append(bucket.members[0])
    fused(self, bucket)


order.Order.timed = timed_then_mixed
Exchange.reduce, Exchange._pushpull = reduce_recorded, pushpull_recorded
Exchange._fused = fused_recorded
for run, at in (("backward", 10 ** 9), ("chosen", order.MEASURE_AT)):
    order.MEASURE_AT = at
    measured_heads.clear()
    arrays, last = {}, {}
    for name, chunk, train in (
            ("resnet18_v1.fit", 16384, lambda: models.train_fit("resnet18_v1", 4, STEPS)),
            ("resnet18_v1.loop", 16384, lambda: models.train_loop("resnet18_v1", 4, STEPS)),
            ("lstm.fit", 4096, lambda: models.train_fit("lstm", 4, STEPS)),
            ("mlp.fit", 16384, mlp_fit)):
        os.environ["GLUONDIST_CHUNK_BYTES"] = str(chunk)
        issued.clear()
        net = train()
        last[name] = issued[-1]  # the last step's order
        arrays.update({f"{name}/{k}": v for k, v in models.params(net).items()})
    rank = gluondist.kvstore.rank()
    if rank == 0:
        np.savez(os.path.join(out, f"params.{run}.npz"), **arrays)
    with open(os.path.join(out, f"heads.{run}.{rank}"), "w") as f:
        f.write("".join(f"{h}\n" for h in measured_heads))
    with open(os.path.join(out, f"issued.{run}.{rank}.json"), "w") as f:
        json.dump(last, f)
