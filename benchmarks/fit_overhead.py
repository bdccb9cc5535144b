"""fit() against the same training written by hand on raw Gluon, alternated in one run.

Same model (a small MLP, where per-batch overhead shows most), data (scikit-learn's digits),
batch, epochs, optimizer and the same per-epoch outputs (training loss and accuracy, kept on the
device as a careful hand-written loop would). Prints each pair and the median ratio fit / hand.

    python benchmarks/fit_overhead.py [--repeats 15] [--epochs 5] [--batch-size 32]
"""
import argparse
import statistics
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from sklearn.datasets import load_digits

import gluondist


def mlp():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(64, activation="relu"),
            gluon.nn.Dense(10))
    return net


def by_hand(X, y, epochs, batch_size, seed):
    mx.random.seed(seed)
    net = mlp()
    net.initialize(mx.init.Xavier())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    for epoch in range(epochs):
        order = np.random.RandomState(seed + epoch).permutation(len(X))
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
        history = (loss_sum.asscalar() / len(X), correct.asscalar() / len(X))
    return net, history


def with_fit(X, y, epochs, batch_size, seed):
    net = mlp()
    h = gluondist.fit(net, (X, y), epochs=epochs, batch_size=batch_size, seed=seed,
                      progress=False, optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    return net, (h.history["loss"][-1], h.history["accuracy"][-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    X, y = load_digits(return_X_y=True)
    X, y = (X / 16.0).astype(np.float32), y.astype(np.float32)
    with_fit(X, y, 1, args.batch_size, 0)  # warm up both paths (allocations, op caches)
    by_hand(X, y, 1, args.batch_size, 0)
    ratios = []
    for rep in range(args.repeats):
        timings = {}
        for name, fn in ((("hand", by_hand), ("fit", with_fit)) if rep % 2 == 0
                         else (("fit", with_fit), ("hand", by_hand))):
            start = time.perf_counter()
            _, (loss, acc) = fn(X, y, args.epochs, args.batch_size, rep)
            timings[name] = time.perf_counter() - start
            assert acc > 0.9, (name, loss, acc)  # both really trained
        ratios.append(timings["fit"] / timings["hand"])
        print(f"repeat {rep}: hand {timings['hand']:.3f}s  fit {timings['fit']:.3f}s  "
              f"ratio {ratios[-1]:.3f}")
    print(f"median fit/hand ratio over {args.repeats} repeats: {statistics.median(ratios):.3f} "
          f"(target <= 1.05)")


if __name__ == "__main__":
    main()
