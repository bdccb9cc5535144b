"""fit() on a DataLoader with worker processes against a hand-written loop over the same
DataLoader, alternated in one run.

The dataset stands in for image decoding and augmentation: every sample goes through a
per-sample numpy transform (random crop, flip, brightness, blur) in the DataLoader's worker
processes. A small CNN trains on it. Both arms produce the same per-epoch outputs (training loss
and accuracy, summed on the device, read once per epoch). Prints each pair and the median ratio
fit / hand.

    python benchmarks/loader_overhead.py [--repeats 5] [--epochs 3] [--workers 2] [--json FILE]
"""
import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from sklearn.datasets import load_digits

import gluondist
from alternate import alternate


class Augmented(gluon.data.Dataset):
    """Digits upscaled to 32x32, cropped, flipped, brightened and blurred per sample."""

    def __init__(self, X, y):
        self.X = np.kron(X.reshape(-1, 8, 8), np.ones((4, 4))).astype(np.float32) / 16.0
        self.y = y.astype(np.float32)

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        rs = np.random.RandomState(i)
        image = np.pad(self.X[i], 2)
        top, left = rs.randint(0, 5, size=2)
        image = image[top:top + 32, left:left + 32]
        if rs.rand() < 0.5:
            image = image[:, ::-1]
        image = image * rs.uniform(0.8, 1.2)
        for _ in range(6):  # the cost of a decode: a few passes over the pixels
            image = (image + np.roll(image, 1, 0) + np.roll(image, 1, 1)) / 3.0
        return image[None].astype(np.float32), self.y[i]


def cnn():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(16, 3, activation="relu"), gluon.nn.MaxPool2D(),
            gluon.nn.Conv2D(32, 3, activation="relu"), gluon.nn.MaxPool2D(),
            gluon.nn.Flatten(), gluon.nn.Dense(10))
    net.hybridize()
    return net


OPT = {"learning_rate": 0.05, "momentum": 0.9}


def by_hand(loader, epochs, seed):
    mx.random.seed(seed)
    net = cnn()
    net.initialize(mx.init.Xavier())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", OPT)
    for _ in range(epochs):
        loss_sum, correct, count = mx.nd.zeros((1,)), mx.nd.zeros((1,)), 0
        for data, label in loader:  # worker processes hand over cpu_shared arrays
            data, label = data.as_in_context(mx.cpu()), label.as_in_context(mx.cpu())
            with autograd.record():
                out = net(data)
                loss = loss_fn(out, label)
            loss.backward()
            trainer.step(data.shape[0])
            loss_sum += loss.sum()
            correct += (out.argmax(axis=1) == label).sum()
            count += data.shape[0]
        history = (loss_sum.asscalar() / count, correct.asscalar() / count)
    return history


def with_fit(loader, epochs, seed):
    h = gluondist.fit(cnn(), loader, epochs=epochs, seed=seed, progress=False,
                      optimizer_params=OPT)
    return h.history["loss"][-1], h.history["accuracy"][-1]


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", metavar="FILE", help="also write the pairs as JSON")
    args = parser.parse_args()
    X, y = load_digits(return_X_y=True)
    loader = gluon.data.DataLoader(Augmented(X, y), batch_size=args.batch_size, shuffle=True,
                                   num_workers=args.workers)
    with_fit(loader, 1, 0)  # warm up both paths
    by_hand(loader, 1, 0)
    def trained(results):  # both really trained (10 classes)
        assert all(accuracy > 0.2 for _, accuracy in results.values()), results

    alternate({"hand": lambda rep: by_hand(loader, args.epochs, rep),
               "fit": lambda rep: with_fit(loader, args.epochs, rep)}, args.repeats, trained,
              save=args.json)

if __name__ == "__main__":
    main()
