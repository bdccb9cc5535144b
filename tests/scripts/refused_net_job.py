"""A net a job cannot train, as a user's script: `refused_net_job.py KIND HOW`.

KIND ``sparse``: an ``Embedding(sparse_grad=True)`` with compression='fp16' (its rows travel
uncompressed only); ``int32``: a net with an int32 parameter that no gradient trains. HOW ``fit`` or ``loop`` (make_trainer). Either must end
with fit's one-line ValueError before any step, not an abort inside a server.
"""
import sys

import mxnet as mx
import numpy as np

import gluondist
from gluondist import kvstore


class Counted(mx.gluon.HybridBlock):
    """A Dense layer beside an int32 counter, as a user might keep one."""

    def __init__(self):
        super().__init__()
        self.dense = mx.gluon.nn.Dense(3)
        self.calls = self.params.get("calls", shape=(1,), dtype="int32", grad_req="null",
                                     init=mx.init.Zero())

    def hybrid_forward(self, F, x, calls):
        return self.dense(x)


def main():
    kind, how = sys.argv[1], sys.argv[2]
    if kind == "sparse":
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Embedding(20, 4, sparse_grad=True), mx.gluon.nn.Dense(3))
    else:
        net = Counted()
    X = np.random.RandomState(0).randint(0, 20, (16, 5)).astype(np.float32)
    y = np.zeros(16, dtype=np.float32)
    compression = "fp16" if kind == "sparse" else None
    if how == "fit":
        gluondist.fit(net, (X, y), batch_size=4, compression=compression)
    else:
        net.initialize()
        net(mx.nd.array(X[:1]))
        kvstore.make_trainer(net.collect_params(), "sgd", compression=compression)
    print("trained", flush=True)


if __name__ == "__main__":
    main()
