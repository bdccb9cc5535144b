"""gluondist.fit as a user's script whose worker 1 hangs when epoch 1 begins (a stuck data
source, say), on the job's first attempt only; fit's heartbeat reports the batches."""
import os
import time

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore


class HangOnce(gluondist.Callback):
    def on_epoch_begin(self, run, epoch):
        first_attempt = os.environ.get("GLUONDIST_RESTART_COUNT", "0") == "0"
        if epoch == 1 and kvstore.rank() == 1 and first_attempt:
            open("1.stuck", "w").close()
            while True:
                time.sleep(1)


rs = np.random.RandomState(0)
X = rs.rand(256, 8).astype(np.float32)
y = (X[:, 0] > 0.5).astype(np.float32)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(8, activation="relu"), mx.gluon.nn.Dense(2))
gluondist.fit(net, (X, y), epochs=3, batch_size=16, seed=0, callbacks=[HangOnce()])
open(f"{kvstore.rank()}.done", "w").close()
