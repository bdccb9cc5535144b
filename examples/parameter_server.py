"""Recipe 1, corrected: parameter-server training of a Dense(10) model.

`python examples/parameter_server.py` trains in one process;
`gluondist launch -n 2 -s 1 examples/parameter_server.py` trains with two workers and a server.
See gluondist/kvstore.py and gluondist/recipes.py for what the copied recipe got wrong.
"""
import mxnet as mx
from sklearn.datasets import load_digits

from gluondist import kvstore
from gluondist.recipes import train_parameter_server

X, y = load_digits(return_X_y=True)
net = mx.gluon.nn.Dense(10)
losses = train_parameter_server(net, X / 16.0, y, epochs=5, batch_size=32,
                                optimizer_params={"learning_rate": 0.5})
print(f"worker {kvstore.rank()} of {kvstore.num_workers()}: loss per epoch "
      + " ".join(f"{l:.4f}" for l in losses))
