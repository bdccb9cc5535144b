"""fit() against the same training written by hand on raw Gluon, alternated in one run.

Both arms hybridize the same MLP (as users do) and produce the same per-epoch outputs: training
loss and accuracy and validation loss and accuracy, summed on the device and read once per
epoch, with the last partial batch kept, as a careful hand-written loop would. Digits from
scikit-learn (1437 training, 360 validation samples). Prints each pair, the median ratio
fit / hand, and checks that both arms ended with the same loss.

    python benchmarks/fit_overhead.py [--repeats 7] [--epochs 40] [--batch-size 64] [--json FILE]
"""
import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from sklearn.datasets import load_digits

import gluondist
from alternate import alternate
from gluondist.kv.sampling import SHUFFLE, derive_seed


def mlp():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(64, activation="relu"),
            gluon.nn.Dense(10))
    net.hybridize()
    return net


OPT = {"learning_rate": 0.1, "momentum": 0.9}


def by_hand(train, val, epochs, batch_size, seed):
    (X, y), (Xv, yv) = train, val
    mx.random.seed(seed)
    net = mlp()
    net.initialize(mx.init.Xavier())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", OPT)
    for epoch in range(epochs):
        # fit's shuffle, so that both arms see the same batches and end alike
        order = np.random.RandomState(derive_seed(seed, SHUFFLE, epoch)).permutation(len(X))
        loss_sum, correct = mx.nd.zeros((1,)), mx.nd.zeros((1,))
        for start in range(0, len(X), batch_size):
            idx = order[start:start + batch_size]
            data, label = mx.nd.array(X[idx]), mx.nd.array(y[idx])
            with autograd.record():
                out = net(data)
                loss = loss_fn(out, label)
            loss.backward()
            trainer.step(len(idx))
            loss_sum += loss.sum()
            correct += (out.argmax(axis=1) == label).sum()
        val_loss, val_correct = mx.nd.zeros((1,)), mx.nd.zeros((1,))
        for start in range(0, len(Xv), batch_size):
            data, label = mx.nd.array(Xv[start:start + batch_size]), \
                mx.nd.array(yv[start:start + batch_size])
            out = net(data)
            val_loss += loss_fn(out, label).sum()
            val_correct += (out.argmax(axis=1) == label).sum()
        history = (loss_sum.asscalar() / len(X), correct.asscalar() / len(X),
                   val_loss.asscalar() / len(Xv), val_correct.asscalar() / len(Xv))
    return history


def with_fit(train, val, epochs, batch_size, seed):
    h = gluondist.fit(mlp(), train, val_data=val, epochs=epochs, batch_size=batch_size,
                      seed=seed, progress=False, optimizer_params=OPT)
    return tuple(h.history[k][-1] for k in ("loss", "accuracy", "val_loss", "val_accuracy"))


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", metavar="FILE", help="also write the pairs as JSON")
    args = parser.parse_args()
    X, y = load_digits(return_X_y=True)
    X, y = (X / 16.0).astype(np.float32), y.astype(np.float32)
    train, val = (X[:1437], y[:1437]), (X[1437:], y[1437:])
    with_fit(train, val, 1, args.batch_size, 0)  # warm up both paths (allocations, op caches)
    by_hand(train, val, 1, args.batch_size, 0)
    def same(results):
        assert results["hand"][3] > 0.85, results  # both really trained...
        assert np.allclose(results["hand"], results["fit"], rtol=1e-3), results  # ...alike

    alternate({"hand": lambda rep: by_hand(train, val, args.epochs, args.batch_size, rep),
               "fit": lambda rep: with_fit(train, val, args.epochs, args.batch_size, rep)},
              args.repeats, same, save=args.json)

if __name__ == "__main__":
    main()
