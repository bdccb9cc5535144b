"""fit as a user's script calls it, run without a terminal: `fit_said.py CKPT EPOCHS...` makes
the same call once for each EPOCHS (as a notebook cell run again). Prints only each History's
epoch count on stdout: what fit says goes to stderr."""
import sys

import mxnet as mx
import numpy as np

import gluondist

rs = np.random.RandomState(0)
# 512 steps an epoch (about 0.5 s): a checkpoint's write (milliseconds) is done before the
# next epoch's, else fit would say that one waits, a line the test does not expect
X = rs.rand(8192, 4).astype(np.float32)
y = (X[:, 0] > 0.5).astype(np.float32)
for epochs in sys.argv[2:]:
    history = gluondist.fit(mx.gluon.nn.Dense(2), (X, y), epochs=int(epochs), batch_size=16,
                            seed=0, checkpoint_dir=sys.argv[1])
    print(f"history: {len(history.epoch)} epoch(s)")
