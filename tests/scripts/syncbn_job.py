"""BatchNorm synchronised over a dist_sync job: `syncbn_job.py OUT_DIR`. Trains, in float64
with a loop of one's own (tests/models.py train_sync), ResNet-18 v1 and MobileNet 0.25 from
the model zoo, an MLP with BatchNorm and an LSTM language model with BatchNorm over its
outputs, each with gluondist.sync_batchnorm; then, in float32 through fit with
sync_batchnorm=True, ResNet-18 v1 for one step. Worker 0 writes each net's arrays to
OUT_DIR/<name>.npz (fit's to OUT_DIR/fit.npz). `syncbn_job.py OUT_DIR plain`, in one process:
the same with MXNet's own BatchNorm, the reference.
"""
import os
import sys

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
