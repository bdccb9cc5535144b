"""What fit's step checkpoints cost: ``checkpoint_every=10`` written in the background, and the
same checkpoints written while the step waits, each against no checkpoints at all.

    python benchmarks/checkpoint_cost.py [--repeats 7] [--steps 40] [--every 10]
                                         [--dir DIR] [--json FILE]

The net is one 64 MB layer (Dense(4096) on 4,096 inputs, then Dense(10)), trained with SGD and
momentum, so a checkpoint holds 128 MB of arrays; 64 random samples a step, ``--steps`` steps
an epoch, 3 epochs. The figure is the time of the third epoch, from its start to the end of
its end's checkpoint step (the step copies; the write of the second epoch's end checkpoint runs
during it, the write of its own is the next epoch's): what a long job pays per epoch. Three
arms, in one process, in a rotating order every round:

- ``none``: no checkpoint_dir;
- ``background``: ``checkpoint_every=--every`` (and the epoch's end), written by fit's thread;
- ``synchronous``: the same checkpoints, each written before the next step (a Checkpointer
  that waits for every write), the cost fit had before checkpoints went to the background;

The figures are the medians over the rounds of background/none and synchronous/none (target
for background: <= 1.05). The checkpoints go to a temporary directory under ``--dir`` (on
the disk, not in memory) and are deleted. ``--json FILE`` saves every round and the command.
"""
import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import mxnet as mx  # noqa: E402

import gluondist  # noqa: E402

WIDTH, BATCH = 4096, 64


def net():
    n = mx.gluon.nn.HybridSequential()
    n.add(mx.gluon.nn.Dense(WIDTH, in_units=WIDTH), mx.gluon.nn.Dense(10, in_units=WIDTH))
    n.initialize(mx.init.Xavier())
    return n


class Clock(gluondist.Callback):
    """The third epoch's time: from its start to on_train_end (placed before fit's own
    Checkpointer, whose on_train_end waits for the last write: that wait is not timed)."""

    def on_epoch_begin(self, run, epoch):
        if epoch == 2:
            mx.nd.waitall()
            self.start = time.perf_counter()

    def on_train_end(self, run):
        mx.nd.waitall()
        self.seconds = time.perf_counter() - self.start


class Synchronous(gluondist.Checkpointer):
    """fit's Checkpointer, but every write complete before the step goes on."""

    def save(self, run, epoch, batch=None, sums=None):
        super().save(run, epoch, batch, sums)
        if self._writer is not None:
            self._writer.drain()


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rs = np.random.RandomState(0)
    data = (rs.rand(BATCH * args.steps, WIDTH).astype(np.float32),
            rs.randint(0, 10, BATCH * args.steps).astype(np.float32))
    root = tempfile.mkdtemp(prefix="ckpt-cost-", dir=args.dir)
    options = dict(epochs=3, batch_size=BATCH, seed=1, progress=False,
                   optimizer_params={"learning_rate": 0.01, "momentum": 0.9})

    def arm(name, rep):
        directory = os.path.join(root, f"{name}-{rep}")
        extra = {} if name == "none" else {"checkpoint_every": args.every,
                                           "checkpoint_dir": directory}
        clock = Clock()
        extra["callbacks"] = [clock] + ([Synchronous(directory)] if name == "synchronous" else [])
        gluondist.fit(net(), data, **options, **extra)
        shutil.rmtree(directory, ignore_errors=True)
        return clock.seconds

    names = ["none", "background", "synchronous"]
    rounds = []
    try:
        arm("none", -1)  # warm-up: MXNet's first-call costs fall on no arm
        for rep in range(args.repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            times = {name: arm(name, rep) for name in order}
            rounds.append(times)
            print(f"round {rep}: " + "  ".join(f"{k} {times[k]:.2f}s" for k in names) + "  " +
                  "  ".join(f"{k}/none {times[k] / times['none']:.3f}" for k in names[1:]),
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {k: statistics.median(r[k] / r["none"] for r in rounds) for k in names[1:]}
    print(f"median over {args.repeats} rounds: " + ", ".join(
        f"{k}/none {v:.3f}" for k, v in result.items()) + " (target for background <= 1.05)")
    if args.json:
        with open(args.json, "w") as f:
            # the compute threads are part of the command: the figure depends on them
            threads = os.environ.get("OMP_NUM_THREADS")
            command = ([f"OMP_NUM_THREADS={threads}"] if threads else []) + ["python"]
            json.dump({"command": " ".join(command + list(map(shlex.quote, sys.argv))),
                       "omp_num_threads": threads, "cores": os.cpu_count(),
                       "steps": args.steps, "every": args.every, "mbytes_of_arrays": 128,
                       "rounds": rounds, "median_ratio": result, "target": 1.05}, f, indent=1)


if __name__ == "__main__":
    main()
