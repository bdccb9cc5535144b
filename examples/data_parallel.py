"""Recipe 2, corrected: data-parallel training across the devices of one machine.

Uses every GPU when there are any, else two CPU contexts (which exercise the same code path).
Batches of any size are split across the devices. See gluondist/parallel.py and gluondist/recipes.py for what the copied
recipe got wrong.
"""
import mxnet as mx
from sklearn.datasets import load_digits

from gluondist import parallel
from gluondist.recipes import train_data_parallel

X, y = load_digits(return_X_y=True)
ctx = parallel.contexts() if mx.context.num_gpus() else parallel.contexts(2)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(64, activation="relu"), mx.gluon.nn.Dense(10))
losses = train_data_parallel(net, X / 16.0, y, ctx=ctx, epochs=5, batch_size=50,
                             optimizer_params={"learning_rate": 0.1})
print(f"{len(ctx)} devices {ctx}: loss per epoch " + " ".join(f"{l:.4f}" for l in losses))
