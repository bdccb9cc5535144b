"""Small gradients fused into shared keys, and each on its own, in one dist_sync job:
`fused_job.py OUT_DIR`. Trains MobileNetV2 0.25 (160 arrays in 1.0 MB, BatchNorm) with fit
and with a loop of one's own (make_trainer), and an LSTM language model (tests/models.py) and
an MLP of 4 small Dense layers with fit, once with GLUONDIST_FUSE_BYTES=0 and once at the
default (each run on keys of its own), and worker 0 writes each run's arrays to
OUT_DIR/params.<fuse>.npz and how many of a MobileNetV2 trainer's gradients travel fused to
OUT_DIR/fused.<fuse>.
"""
import os
import sys

import mxnet as mx
import numpy as np

import gluondist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import models  # noqa: E402

out = sys.argv[1]


def mlp_fit():
    net = mx.gluon.nn.HybridSequential()
    for units in (32, 24, 16):
        net.add(mx.gluon.nn.Dense(units, activation="relu"))
    net.add(mx.gluon.nn.Dense(models.CLASSES))
    rs = np.random.RandomState(3)
    X, y = rs.rand(64, 12).astype(np.float32), rs.randint(0, models.CLASSES, 64)
    gluondist.fit(net, (X, y.astype(np.float32)), epochs=2, batch_size=8, seed=5,
                  progress=False, optimizer_params=dict(models.OPTIMIZER))
    return net


for fuse in ("0", "default"):
    if fuse == "0":
        os.environ["GLUONDIST_FUSE_BYTES"] = "0"
    else:
        os.environ.pop("GLUONDIST_FUSE_BYTES", None)
    arrays = {}
    for name, net in (("mobilenetv2_0.25.fit", models.train_fit("mobilenetv2_0.25", 4, 2)),
                      ("mobilenetv2_0.25.loop", models.train_loop("mobilenetv2_0.25", 4, 2)),
                      ("lstm.fit", models.train_fit("lstm", 4, 2)),
                      ("mlp.fit", mlp_fit())):
        arrays.update({f"{name}/{k}": v for k, v in models.params(net).items()})
    # how many of a MobileNetV2's gradients a trainer of this setting sends fused
    probe = models.build("mobilenetv2_0.25")
    probe.initialize(mx.init.Xavier())
    probe(mx.nd.array(models.data("mobilenetv2_0.25", 1)[0]))
    trainer = gluondist.kvstore.make_trainer(probe.collect_params(), "sgd", {})
    fused = sum(len(b.members) for b in trainer.exchange.buckets)
    if gluondist.kvstore.rank() == 0:
        np.savez(os.path.join(out, f"params.{fuse}.npz"), **arrays)
        with open(os.path.join(out, f"fused.{fuse}"), "w") as f:
            f.write(f"{fused} of {len(trainer.exchange.params)}")

# workers that would fuse up to different sizes (here worker 1 sets another bound): refused
# in one line on every worker, before any push of a size the other does not send
os.environ["GLUONDIST_FUSE_BYTES"] = "2048" if gluondist.kvstore.rank() == 1 else "4096"
probe = models.build("lstm")
probe.initialize(mx.init.Xavier())
probe(mx.nd.array(models.data("lstm", 1)[0]))
try:
    gluondist.kvstore.make_trainer(probe.collect_params(), "sgd", {})
    said = "made"
except RuntimeError as exc:
    said = str(exc)
with open(os.path.join(out, f"differ.{gluondist.kvstore.rank()}"), "w") as f:
    f.write(said)
