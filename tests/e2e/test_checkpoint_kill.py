"""A process killed while fit writes a checkpoint: the previous checkpoint stays whole and is
the one resumed from (the in-process checkpoint tests are training/test_checkpoints.py)."""
import os

import mxnet as mx
import numpy as np

import gluondist
from gluondist import checkpoint

from conftest import OPT, assert_same_params, kill_during_a_write


def test_kill_during_a_checkpoint_write_keeps_the_previous_one(tmp_path):
    ckpt = tmp_path / "ckpt"
    kill_during_a_write(ckpt, tmp_path / "writing")
    assert checkpoint.load_latest(ckpt).epoch == 0

    # Resuming from epoch 0's checkpoint ends where an uninterrupted run does.
    rs = np.random.RandomState(0)
    X, y = rs.rand(200, 8).astype(np.float32), rs.randint(0, 3, 200)

    def net3():
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
        return net
    resumed, full = net3(), net3()
    h = gluondist.fit(resumed, (X, y), epochs=3, batch_size=16, seed=5, checkpoint_dir=ckpt,
                      optimizer_params=OPT)
    gluondist.fit(full, (X, y), epochs=3, batch_size=16, seed=5, optimizer_params=OPT)
    assert len(h.history["loss"]) == 3
    assert_same_params(resumed, full, 1e-4)
    assert sorted(os.listdir(ckpt)) == ["ckpt-000001", "ckpt-000002"]  # stray tmp gone
