"""Train a model-zoo ResNet-18 on scikit-learn's bundled handwritten digits with gluondist.fit.

Each 8x8 digit is scaled up to a 32x32 RGB image, small for ResNet but enough. The same
script runs in one process (`python examples/resnet.py`), on several devices (`--ctx 2`), and
as a parameter-server job (`gluondist launch -n 2 -s 1 examples/resnet.py`), where each worker
normalises its slice of every batch with BatchNorm and fit averages the running statistics
over the workers at the end of every epoch (docs/models.md).
"""
import argparse

import mxnet as mx
import numpy as np
from mxnet.gluon.model_zoo import vision
from sklearn.datasets import load_digits

import gluondist


def images(samples=None, seed=0):
    """The digits as 32x32 RGB images in [0, 1], shuffled, cut 80/20 into training and
    validation data (the first ``samples`` only, if given)."""
    X, y = load_digits(return_X_y=True)
    order = np.random.RandomState(seed).permutation(len(X))[:samples]
    X = (X[order] / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    X = np.repeat(np.kron(X, np.ones((1, 1, 4, 4), dtype=np.float32)), 3, axis=1)
    y = y[order].astype(np.float32)
    cut = int(len(X) * 0.8)
    return (X[:cut], y[:cut]), (X[cut:], y[cut:])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="resnet18_v1", help="a model-zoo name")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--samples", type=int, default=None, help="use only this many digits")
    parser.add_argument("--ctx", default=None, help="devices: 2, 'cpu:0,cpu:1', 'gpu:0' ...")
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    train, val = images(args.samples)
    net = vision.get_model(args.model, classes=10)
    net.hybridize()
    ctx = int(args.ctx) if args.ctx and args.ctx.isdigit() else args.ctx
    history = gluondist.fit(net, train, val_data=val, epochs=args.epochs,
                            batch_size=args.batch_size, ctx=ctx, seed=args.seed,
                            optimizer_params={"learning_rate": args.lr, "momentum": 0.9,
                                              "wd": 1e-4},
                            checkpoint_dir=args.checkpoint_dir)
    if gluondist.kvstore.rank() == 0 and history.epoch:
        print(f"final validation accuracy: {history.history['val_accuracy'][-1]:.4f}")


if __name__ == "__main__":
    main()
