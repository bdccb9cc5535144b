"""BatchNorm synchronised over a dist_sync job: `syncbn_job.py OUT_DIR`. Trains, in float64
with a loop of one's own (tests/models.py train_sync), ResNet-18 v1 and MobileNet 0.25 from
the model zoo, an MLP with BatchNorm and an LSTM language model with BatchNorm over its
outputs, each with gluondist.sync_batchnorm; then, in float32 through fit with
sync_batchnorm=True, ResNet-18 v1 for one step. Worker 0 writes each net's arrays to
OUT_DIR/<name>.npz (fit's to OUT_DIR/fit.npz). `syncbn_job.py OUT_DIR plain`, in one process:
the same with MXNet's own BatchNorm, the reference.

With 2 workers, then, ResNet-18 v1 and MobileNet 0.25 in float32 with compression='fp16'
beside a reference of the same arithmetic in the same job (see fp16_pair): OUT_DIR/fp16.npz;
and worker 0 calls sync_batchnorm while worker 1 makes a trainer: what each was told,
OUT_DIR/differ.<rank>.
"""
import os
import sys

import mxnet as mx
import numpy as np

import gluondist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import models  # noqa: E402

NETS = ("resnet18_v1", "mobilenet0.25", "mlpbn", "lstmbn")
BATCH, STEPS = 12, 3  # the global batch: split over the workers

out, sync = sys.argv[1], sys.argv[2:] != ["plain"]
workers = gluondist.kvstore.num_workers()
for name in NETS:
    net = models.train_sync(name, BATCH // workers, STEPS, sync=sync)
    if gluondist.kvstore.rank() == 0:
        np.savez(os.path.join(out, f"{name}.npz"), **models.params(net))
net = models.train_fit("resnet18_v1", BATCH // workers, 1, sync_batchnorm=sync)
if gluondist.kvstore.rank() == 0:
    np.savez(os.path.join(out, "fit.npz"), **models.params(net))


def fp16_pair(name, batch, steps):
    """``name`` trained twice side by side, float32, its BatchNorm synchronised: by
    make_trainer with compression='fp16', and by a trainer of this process's own fed what the
    wire gives back (compression.py): each worker's gradient halved, cast to float16, the two
    halves summed and rounded to float16 (their exact sum, here through allreduce's float64),
    cast back and doubled. Both nets' arrays, and the share of gradient elements the wire
    rounded at the first step."""
    X, y = models.data(name, batch * 2 * steps)
    nets = []
    for _ in range(2):
        net = models.build(name)
        mx.random.seed(5)
        net.initialize(mx.init.Xavier())
        net(mx.nd.array(X[:1]))
        gluondist.sync_batchnorm(net)
        nets.append(net)
    job, ref = nets
    trainer = gluondist.kvstore.make_trainer(job.collect_params(), "sgd", dict(models.OPTIMIZER),
                                             compression="fp16")
    own = mx.gluon.Trainer(ref.collect_params(), "sgd", dict(models.OPTIMIZER), kvstore=None)
    trained = [p for p in ref.collect_params().values() if p.grad_req != "null"]
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    sampler = gluondist.kvstore.ShardedBatchSampler(len(X), batch, 2, gluondist.kvstore.rank(),
                                                    seed=5)
    rounded = None
    for indices, count in sampler.batches():
        for net in nets:
            with mx.autograd.record():
                losses = loss(net(mx.nd.array(X[indices])), mx.nd.array(y[indices]))
            losses.backward()
        trainer.step(count)
        grads = np.concatenate([p.grad().asnumpy().ravel() for p in trained])
        half = (grads * np.float32(0.5)).astype(np.float16)
        wire = gluondist.kvstore.allreduce(half).astype(np.float16).astype(np.float32) * 2
        if rounded is None:
            plain = gluondist.kvstore.allreduce(grads).astype(np.float32)
            rounded = float(np.mean(wire != plain))
        at = 0
        for p in trained:
            p.grad()[:] = wire[at:at + p.grad().size].reshape(p.shape)
            at += p.grad().size
        own.update(count)
    return models.params(job), models.params(ref), rounded


if sync and workers == 2:
    arrays = {}
    for name in ("resnet18_v1", "mobilenet0.25"):
        found, expected, rounded = fp16_pair(name, BATCH // workers, 2)
        arrays.update({f"{name}.job.{k}": v for k, v in found.items()})
        arrays.update({f"{name}.ref.{k}": v for k, v in expected.items()})
        arrays[f"{name}.rounded"] = np.float64(rounded)
    if gluondist.kvstore.rank() == 0:
        np.savez(os.path.join(out, "fp16.npz"), **arrays)
    # worker 0 converts a net while worker 1 makes a trainer: each is told, and by what
    net = models.build("mlpbn")
    net.initialize()
    net(mx.nd.array(models.data("mlpbn", 2)[0]))
    try:
        if gluondist.kvstore.rank() == 0:
            gluondist.sync_batchnorm(net)
        else:
            gluondist.kvstore.make_trainer(net.collect_params(), "sgd", dict(models.OPTIMIZER))
        said = "nothing"
    except RuntimeError as exc:
        said = str(exc)
    with open(os.path.join(out, f"differ.{gluondist.kvstore.rank()}"), "w") as f:
        f.write(said)
