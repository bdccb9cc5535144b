"""Fit with checkpoints, but hang halfway through writing epoch 1's (the test then kill -9s us).

argv: checkpoint_dir marker_file
"""
import pickle
import sys
import time

import mxnet as mx
import numpy as np

import gluondist
import gluondist.checkpoint as ck

checkpoint_dir, marker = sys.argv[1], sys.argv[2]


class HalfWrite:
    def __getattr__(self, name):
        return getattr(pickle, name)

    def dump(self, obj, f, protocol=None):
        if obj["epoch"] == 1:
            blob = pickle.dumps(obj, protocol=protocol)
            f.write(blob[:len(blob) // 2])
            f.flush()
            open(marker, "w").close()
            time.sleep(600)
        pickle.dump(obj, f, protocol=protocol)


ck.pickle = HalfWrite()
rs = np.random.RandomState(0)
X, y = rs.rand(200, 8).astype(np.float32), rs.randint(0, 3, 200)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
gluondist.fit(net, (X, y), epochs=3, batch_size=16, seed=5, checkpoint_dir=checkpoint_dir,
              optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
