"""Fit with checkpoints, but hang halfway through writing one (the test then kill -9s us).

argv: checkpoint_dir marker_file [every [resume]]

Without ``every`` the write of epoch 1's checkpoint hangs (the epoch's end; 0-based); with it
(fit's checkpoint_every) the write of the second step checkpoint, after batch 2*every of
epoch 0. The marker file is made once the write has begun: params and half of state.json are
on disk. With ``resume`` nothing hangs, and the final parameters go to checkpoint_dir/params.npz.
"""
import os
import sys
import time

import mxnet as mx
import numpy as np

import gluondist
from gluondist import snapshot

checkpoint_dir, marker = sys.argv[1], sys.argv[2]
every = int(sys.argv[3]) if len(sys.argv) > 3 else None
resume = len(sys.argv) > 4 and sys.argv[4] == "resume"
files = snapshot.Snapshot._files


def half_write(self, tmp):
    """The real write, except that the chosen checkpoint's state.json is written half, then
    the writer hangs."""
    if (self.epoch, self.batch) != ((0, 2 * every) if every else (1, None)):
        return files(self, tmp)
    tmp.mkdir(parents=True)
    mx.nd.save(str(tmp / snapshot.PARAMS), self.params)
    with open(tmp / snapshot.STATE, "w") as f:
        f.write(self.state[:len(self.state) // 2])
        f.flush()
    open(marker, "w").close()
    time.sleep(600)


if not resume:
    snapshot.Snapshot._files = half_write
rs = np.random.RandomState(0)
X, y = rs.rand(200, 8).astype(np.float32), rs.randint(0, 3, 200)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
gluondist.fit(net, (X, y), epochs=3, batch_size=16, seed=5, checkpoint_dir=checkpoint_dir,
              optimizer_params={"learning_rate": 0.1, "momentum": 0.9}, checkpoint_every=every)
if resume:
    np.savez(os.path.join(checkpoint_dir, "params.npz"),
             **{k: p.data().asnumpy() for k, p in net._collect_params_with_prefix().items()})
