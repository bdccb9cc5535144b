"""Fit with checkpoints, but hang halfway through writing epoch 1's (the test then kill -9s us).

argv: checkpoint_dir marker_file
"""
import json
import sys
import time

import mxnet as mx
import numpy as np

import gluondist
import gluondist.checkpoint as ck

checkpoint_dir, marker = sys.argv[1], sys.argv[2]


class HalfWrite:
    """json, except that epoch 1's state.json is written half, then the writer hangs."""

    def __getattr__(self, name):
        return getattr(json, name)

    def dump(self, obj, f, **kwargs):
        if obj.get("epoch") == 1:
            text = json.dumps(obj)
            f.write(text[:len(text) // 2])
            f.flush()
            open(marker, "w").close()
            time.sleep(600)
        json.dump(obj, f, **kwargs)


ck.json = HalfWrite()
rs = np.random.RandomState(0)
X, y = rs.rand(200, 8).astype(np.float32), rs.randint(0, 3, 200)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
gluondist.fit(net, (X, y), epochs=3, batch_size=16, seed=5, checkpoint_dir=checkpoint_dir,
              optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
