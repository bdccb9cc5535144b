"""A hand-written loop that ends right after its last ``trainer.step()`` (issue 36, defect 11):
docs/own-loop.md's loop without the per-epoch allreduce, so the last step's push and pull are
still in MXNet's engine when the script returns. Each worker writes done.<rank> in the working
directory once its loop is over (nothing waits for the engine)."""
import mxnet as mx
import numpy as np
from mxnet import autograd

from gluondist import kvstore

rng = np.random.RandomState(0)
X = rng.rand(64, 8).astype(np.float32)
y = (X.sum(axis=1) > 4).astype(np.float32)
mx.random.seed(0)

net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(2))
net.initialize(mx.init.Xavier())
net(mx.nd.array(X[:1]))

batch_size = 8
kv = kvstore.create()
trainer = kvstore.make_trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kv,
                               batch_size=batch_size)
step = kvstore.TrainStep(trainer, kv, [mx.cpu()], batch_size)
sampler = kvstore.ShardedBatchSampler(len(X), batch_size, kvstore.num_workers(),
                                      kvstore.rank(), seed=0)
loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()

for epoch in range(2):
    sampler.set_epoch(epoch)
    for idx, global_count in sampler.batches():
        scale = step.loss_scale(len(idx))
        rows = idx if len(idx) else np.arange(1)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(X[rows])), mx.nd.array(y[rows])) * scale
        loss.backward()
        step(global_count)
open(f"done.{kvstore.rank()}", "w").close()  # and the script ends: no allreduce, no waitall
