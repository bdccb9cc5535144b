"""The two recipes people copy, done right: parameter-server mode and data-parallel mode.

Each is a complete training loop on ``(X, y)`` arrays, written out so it can be read and
adapted; :func:`gluondist.fit` does the same with checkpoints, metrics and callbacks."""
from __future__ import annotations

from typing import List

import numpy as np

from . import heartbeat, kvstore as kvs, parallel
from ._mx import mx


def train_parameter_server(net, X, y, epochs: int = 1, batch_size: int = 32, loss=None,
                           optimizer="sgd", optimizer_params=None, kvstore="auto",
                           seed: int = 0) -> List[float]:
    """Recipe 1 done right: train ``net`` on ``(X, y)`` in parameter-server mode.

    Runs as it is in one process, and under ``gluondist launch`` as one of N workers (each takes
    its slice of every global batch of ``batch_size * N``; ``dist_sync`` or ``dist_async``).
    Returns the mean training loss of each epoch over this worker's samples."""
    X, y = np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.float32)
    mx.random.seed(seed)
    loss = loss or mx.gluon.loss.SoftmaxCrossEntropyLoss()
    ctxs = [mx.cpu()]
    parallel.initialize(net, ctxs, sample=X[:1])  # shapes must be known before the sync
    kv = kvs.create(kvstore)
    trainer = kvs.make_trainer(net.collect_params(), optimizer,
                               optimizer_params or {"learning_rate": 0.1}, kv,
                               batch_size=batch_size)
    step = kvs.TrainStep(trainer, kv, ctxs, batch_size)
    sampler = kvs.ShardedBatchSampler(len(X), batch_size, kvs.num_workers(),
                                      kvs.rank(), seed=seed)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total, count = mx.nd.zeros((1,)), 0
        for idx, global_count in sampler.batches():
            scale = step.loss_scale(len(idx))  # 0 for an empty share: it still pushes (zeros)
            idx = idx if len(idx) else np.arange(1)
            _, batch_losses = parallel.forward_backward(
                net, loss, [mx.nd.array(X[idx])], [mx.nd.array(y[idx])], ctxs, scale=scale)
            step(global_count)  # servers sum all workers' gradients: divide by all
            heartbeat.beat()
            if scale:
                total += batch_losses[0].sum()
                count += len(idx)
        losses.append(total.asscalar() / max(count, 1))
    return losses


def train_data_parallel(net, X, y, ctx: parallel.Contexts = None, epochs: int = 1,
                        batch_size: int = 64, loss=None, optimizer="sgd", optimizer_params=None,
                        seed: int = 0) -> List[float]:
    """Recipe 2 done right: train ``net`` on ``(X, y)`` across the devices ``ctx``.

    Parameters live on every device, each batch (any size) is split across them, each device
    runs forward and backward on its part, and one trainer step applies the mean gradient of the
    whole batch. Returns the mean training loss of each epoch."""
    X, y = np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.float32)
    ctxs = parallel.contexts(ctx)
    mx.random.seed(seed)
    loss = loss or mx.gluon.loss.SoftmaxCrossEntropyLoss()
    parallel.initialize(net, ctxs, sample=X[:1])
    trainer = kvs.make_trainer(net.collect_params(), optimizer,
                               optimizer_params or {"learning_rate": 0.1},
                               "device" if len(ctxs) > 1 else None)
    sampler = kvs.ShardedBatchSampler(len(X), batch_size, seed=seed)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total = 0.0
        for idx, count in sampler.batches():
            _, batch_losses = parallel.forward_backward(
                net, loss, parallel.split(X[idx], ctxs), parallel.split(y[idx], ctxs), ctxs)
            trainer.step(count)
            heartbeat.beat()
            total += sum(l.sum().asscalar() for l in batch_losses if l is not None)
        losses.append(total / len(X))
    return losses
