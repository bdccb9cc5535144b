"""Train an MLP on scikit-learn's bundled handwritten digits with gluondist.fit.

The same script runs in one process (`python examples/digits.py`), on several devices
(`--ctx 2`), and as a parameter-server job (`gluondist launch -n 2 -s 1 examples/digits.py`).
"""
import argparse

import mxnet as mx
import numpy as np
from sklearn.datasets import load_digits

import gluondist


def data(seed=0):
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(X))
    X, y = X[order], y[order]
    cut = int(len(X) * 0.8)
    return (X[:cut], y[:cut]), (X[cut:], y[cut:])


def mlp():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(128, activation="relu"), mx.gluon.nn.Dense(64, activation="relu"),
            mx.gluon.nn.Dense(10))
    return net


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--ctx", default=None, help="devices: 2, 'cpu:0,cpu:1', 'gpu:0' ...")
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--plot", default=None, help="write the learning curves to this file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    train, val = data()
    ctx = int(args.ctx) if args.ctx and args.ctx.isdigit() else args.ctx
    history = gluondist.fit(mlp(), train, val_data=val, epochs=args.epochs,
                            batch_size=args.batch_size, ctx=ctx, seed=args.seed,
                            optimizer_params={"learning_rate": args.lr, "momentum": 0.9},
                            checkpoint_dir=args.checkpoint_dir)
    # fit shows a line per epoch (worker 0's); --epochs 0 trains nothing: an empty History
    if gluondist.kvstore.rank() == 0 and history.epoch:
        print(f"final validation accuracy: {history.history['val_accuracy'][-1]:.4f}")
        if args.plot:
            history.plot(args.plot)


if __name__ == "__main__":
    main()
