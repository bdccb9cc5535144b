"""Row-sparse gradients (Embedding(sparse_grad=True)) in a dist_sync job: `sparse_job.py
OUT_DIR`. Trains the recommender of tests/models.py (two embeddings, matrix factorisation)
with a loop of one's own, by SGD with momentum and by Adam (lazy updates, MXNet's default for
row-sparse gradients), and beside an embedding no batch uses (``unused``, stepped with
ignore_stale_grad); an LSTM language model over a row-sparse embedding with fit; the
recommender with fit for 3 epochs, straight and as 2 epochs then a resume from that
checkpoint; and for one epoch of 482 samples (``uneven``: with 3 workers the last global batch
of 2 leaves one worker a stand-in sample). Worker 0 writes each run's arrays to OUT_DIR/<run>.npz and the embedding of the
checkpoint after epoch 2 to OUT_DIR/checkpoint.npz. Outside a job, the same in one process
with the global batch (the reference).
"""
import os
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist import checkpoint, kvstore

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import models  # noqa: E402

BATCH, SAMPLES = 48, 480  # the global batch
out = sys.argv[1]
workers, rank = kvstore.num_workers(), kvstore.rank()


def save(name, net):
    if rank == 0:
        np.savez(os.path.join(out, f"{name}.npz"), **models.params(net))


def loop(optimizer, settings, unused=False):
    net = models.build("recommender")
    if unused:
        with net.name_scope():
            net.spare = mx.gluon.nn.Embedding(40, 8, sparse_grad=True)
    mx.random.seed(5)
    net.initialize(mx.init.Normal(0.1))
    X, y = models.data("recommender", SAMPLES)
    net(mx.nd.array(X[:1]))
    trainer = kvstore.make_trainer(net.collect_params(), optimizer, settings)
    sampler = kvstore.ShardedBatchSampler(len(X), BATCH // workers, workers, rank, seed=5)
    loss = mx.gluon.loss.L2Loss()
    for _ in range(2):
        for indices, count in sampler.batches():
            with mx.autograd.record():
                losses = loss(net(mx.nd.array(X[indices])), mx.nd.array(y[indices]))
            losses.backward()
            trainer.step(count, ignore_stale_grad=unused)
    return net


def fit(name, epochs, ckpt=None, samples=SAMPLES):
    net = models.build(name)
    X, y = models.data(name, samples)
    kw = dict(loss=mx.gluon.loss.L2Loss(), metrics=[]) if name == "recommender" else {}
    gluondist.fit(net, (X, y), epochs=epochs, batch_size=BATCH // workers, seed=5,
                  progress=False, optimizer_params=dict(models.OPTIMIZER),
                  checkpoint_dir=ckpt, **kw)
    return net


save("sgd", loop("sgd", {"learning_rate": 0.05, "momentum": 0.9}))
save("adam", loop("adam", {"learning_rate": 0.01}))
save("unused", loop("adam", {"learning_rate": 0.01}, unused=True))
save("lm", fit("lstmsparse", 2))
save("straight", fit("recommender", 3))
ckpt = os.path.join(out, "ckpt")
fit("recommender", 2, ckpt)
if rank == 0:
    saved = checkpoint.load_latest(ckpt)
    np.savez(os.path.join(out, "checkpoint.npz"), epochs=saved.epoch + 1,  # 0-based
             **{k: v.asnumpy() for k, v in saved.params.items()})
save("resumed", fit("recommender", 3, ckpt))
save("uneven", fit("recommender", 1, samples=482))
