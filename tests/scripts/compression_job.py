"""Every compression in one dist_sync job: `compression_job.py OUT_DIR THRESHOLD`; worker 0
writes OUT_DIR/result.npz and OUT_DIR/result.json.

In this order, because MXNet's 2-bit is the process's kvstore's for good:
1. fp16: make_trainer's three steps beside a one-process reference of the same arithmetic
   (both workers' gradients computed here, halved, cast to float16, added as the server adds,
   cast back, doubled, then the same SGD update) -> ``fp16.ref``/``fp16.job``; and that
   reference without compression -> ``plain.ref``;
2. fp16: fit of a net with a 300 KB layer sent whole and in 75 chunks of 4 KiB
   (``fp16.<chunk>.<name>``), and fit resumed after epoch 1 of 2 beside the same fit uninterrupted
   (``fp16.resumed.<name>``, ``fp16.straight.<name>``); a gradient past float16's range;
   workers that ask for different compressions;
3. 2bit (THRESHOLD): the reference as in 1, with each worker's residual, thresholding and
   decoding as MXNet's -> ``2bit.ref``/``2bit.job``; allreduce of float64 values through it;
   the fits whole and chunked; a trainer without compression, and one of a float64 net,
   refused (their messages).
"""
import json
import os
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore

out, threshold = sys.argv[1], float(sys.argv[2])
WORKERS, B, LR = 2, 8, 0.1
arrays, notes = {}, {}


def batches(step):
    """Both workers' batches of a step: ``[(x, y)] * WORKERS``."""
    rs = np.random.RandomState(step)
    return [(rs.randn(B, 5).astype(np.float32), rs.randn(B, 3).astype(np.float32))
            for _ in range(WORKERS)]


def linear():
    net = mx.gluon.nn.Dense(3, in_units=5)
    net.initialize(mx.init.Constant(0.1))
    return net


def gradient(net, x, y):
    with mx.autograd.record():
        loss = mx.gluon.loss.L2Loss()(net(mx.nd.array(x)), mx.nd.array(y))
    loss.backward()
    return [p.grad().copy() for p in net.collect_params().values()]


def wire(kind, grads, residuals):
    """What the servers' sum comes back as, from each worker's gradients (numpy float32)."""
    if kind == "plain":  # float32, no compression
        return grads[0] + grads[1]
    if kind == "fp16":
        halves = [(g / np.float32(WORKERS)).astype(np.float16) for g in grads]
        total = halves[0]
        for h in halves[1:]:
            total = (total.astype(np.float32) + h.astype(np.float32)).astype(np.float16)
        return total.astype(np.float32) * np.float32(WORKERS)
    sent = []
    for i, g in enumerate(grads):
        residuals[i] = residuals[i] + g
        q = np.where(residuals[i] >= threshold, np.float32(threshold),
                     np.where(residuals[i] <= -threshold, np.float32(-threshold),
                              np.float32(0))).astype(np.float32)
        residuals[i] = residuals[i] - q
        sent.append(q)
    return sent[0] + sent[1]


def against_reference(kind, compression):
    net, ref = linear(), linear()
    if compression is not None:
        trainer = kvstore.make_trainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                       compression=compression)
        step = kvstore.TrainStep(trainer, kvstore.create(), [mx.cpu()], B)
    local = mx.gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": LR}, kvstore=None)
    residuals = {}
    for s in range(3):
        both = batches(s)
        if compression is not None:
            gradient(net, *both[kvstore.rank()])
            step(B * WORKERS)
        per_worker = [gradient(ref, x, y) for x, y in both]
        for j, p in enumerate(ref.collect_params().values()):
            held = {i: residuals.get((i, j), np.zeros(p.shape, np.float32))
                    for i in range(WORKERS)}
            p.grad()[:] = wire(kind, [g[j].asnumpy() for g in per_worker], held)
            residuals.update({(i, j): r for i, r in held.items()})
        local.update(B * WORKERS)
    for name, model in (("job", net), ("ref", ref)):
        arrays[f"{kind}.{name}"] = np.concatenate(
            [p.data().asnumpy().ravel() for p in model.collect_params().values()])


rs = np.random.RandomState(0)
X = rs.rand(96, 256).astype(np.float32)
y = rs.randint(0, 10, 96).astype(np.float32)


def big_fit(tag, compression, chunk, epochs=2, **kw):
    os.environ["GLUONDIST_CHUNK_BYTES"] = chunk
    model = mx.gluon.nn.HybridSequential()
    model.add(mx.gluon.nn.Dense(300, activation="relu", in_units=256), mx.gluon.nn.Dense(10))
    gluondist.fit(model, (X, y), epochs=epochs, batch_size=16, seed=3, progress=False,
                  optimizer_params={"learning_rate": 0.05, "momentum": 0.9},
                  compression=compression, **kw)
    for name, p in model._collect_params_with_prefix().items():
        arrays[f"{tag}.{name}"] = p.data().asnumpy()


against_reference("plain", None)  # the reference without compression (no job)
against_reference("fp16", "fp16")
for chunk in ("0", "4096"):
    big_fit(f"fp16.{chunk}", "fp16", chunk)
ckpt = os.path.join(out, "ckpt")
big_fit("fp16.cut", "fp16", "4096", epochs=1, checkpoint_dir=ckpt)
big_fit("fp16.resumed", "fp16", "4096", epochs=2, checkpoint_dir=ckpt)
big_fit("fp16.straight", "fp16", "4096", epochs=2)


def overflow():
    """A gradient element of 1e5 (> 65504) on each worker: the step refuses, it does not update."""
    net = linear()
    trainer = kvstore.make_trainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                   compression="fp16")
    step = kvstore.TrainStep(trainer, kvstore.create(), [mx.cpu()], B)
    gradient(net, *batches(0)[kvstore.rank()])
    net.weight.grad()[0, 0] = 1e5
    try:
        step(B * WORKERS)
    except FloatingPointError as exc:
        notes["overflow"] = str(exc)
    notes["untouched"] = float(net.weight.data()[0, 0].asscalar())


overflow()


def own_loop():
    """A hand-written loop (trainer.step, no TrainStep): the overflow is raised by that step,
    before its update, as TrainStep raises it; a float16 net is refused in one line."""
    net = linear()
    trainer = kvstore.make_trainer(net.collect_params(), "sgd", {"learning_rate": LR},
                                   compression="fp16")
    gradient(net, *batches(0)[kvstore.rank()])
    net.weight.grad()[0, 0] = 1e5
    before = net.weight.data().copy()
    try:
        trainer.step(B * WORKERS)
    except FloatingPointError as exc:
        notes["own_loop"] = str(exc)
        notes["own_loop_untouched"] = bool((net.weight.data() == before).asnumpy().all())
    half = linear()
    half.cast("float16")
    try:
        kvstore.make_trainer(half.collect_params(), "sgd", compression="fp16")
    except ValueError as exc:
        notes["float16"] = str(exc)


own_loop()
try:  # worker 0 asks for fp16, worker 1 for none: refused on both, before any key is made
    kvstore.make_trainer(linear().collect_params(), "sgd", {"learning_rate": LR},
                         compression="fp16" if kvstore.rank() == 0 else None)
except RuntimeError as exc:
    notes["differ"] = str(exc)
against_reference("2bit", {"type": "2bit", "threshold": threshold})
notes["allreduce"] = kvstore.allreduce([1 + 2 ** -40, kvstore.rank() + 0.25, -3e300]).tolist()
for chunk in ("0", "4096"):
    big_fit(f"2bit.{chunk}", {"type": "2bit", "threshold": threshold}, chunk)
try:
    kvstore.make_trainer(linear().collect_params(), "sgd", {"learning_rate": LR})
except ValueError as exc:
    notes["refused"] = str(exc)
double = linear()
double.cast("float64")
try:  # MXNet would raise from inside its kvstore, at the first broadcast
    kvstore.make_trainer(double.collect_params(), "sgd", compression="2bit")
except ValueError as exc:
    notes["float64"] = str(exc)

if kvstore.rank() == 0:
    np.savez(os.path.join(out, "result.npz"), **arrays)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(notes, f)
