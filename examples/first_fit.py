"""The first fit of the docs (Getting started), runnable as it is: `python examples/first_fit.py`
(needs the examples extra: scikit-learn and matplotlib). The same lines, printing the last
validation accuracy. It checkpoints to ckpt/ in the working directory, so running it again
resumes that run, and says so."""
import mxnet as mx
import numpy as np
from sklearn.datasets import load_digits

import gluondist

X, y = load_digits(return_X_y=True)
X = (X / 16.0).astype(np.float32)
order = np.random.RandomState(0).permutation(len(X))
X, y, X_val, y_val = X[order[:1400]], y[order[:1400]], X[order[1400:]], y[order[1400:]]

net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(128, activation="relu"), mx.gluon.nn.Dense(10))
history = gluondist.fit(net, (X, y), val_data=(X_val, y_val), epochs=15, batch_size=32,
                        optimizer_params={"learning_rate": 0.1, "momentum": 0.9},
                        checkpoint_dir="ckpt", seed=0)
print("validation accuracy:", history.history["val_accuracy"][-1])  # one value per epoch
history.plot("curves.png")        # the learning curves (matplotlib)
