"""What BatchNorm synchronised over the job (fit's ``sync_batchnorm=True``, gluondist.syncbn)
costs on real nets: a 2-worker, 1-server dist_sync job on this machine trains each model
through ``fit`` with and without it, the two alternating, and the median epoch of each is
compared. The nets are the model zoo's (tests/models.py), 3x32x32 inputs, 16 samples a worker
a step, 8 steps an epoch, 3 epochs, the first left out; one OpenMP thread a worker (the
launcher's default on 2 cores).

    python benchmarks/syncbn.py [--models resnet18_v1 mobilenetv2_0.25] [--repeats 5]
                                [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH, STEPS, EPOCHS = 16, 8, 3


class EpochTimes:
    """Worker 0's wall time of each epoch, to the end of its last update."""

    def __init__(self):
        import gluondist
        self.base, self.times = gluondist.Callback, []

    def make(self):
        times = self.times

        class Timer(self.base):
            def on_epoch_begin(self, run, epoch):
                self.start = time.perf_counter()

            def on_epoch_end(self, run, epoch, logs):
                import mxnet as mx
                mx.nd.waitall()
                times.append(time.perf_counter() - self.start)
        return Timer()


def worker(model: str, sync: str, out: str) -> None:
    """One worker of the job: ``model`` through fit; worker 0 writes its epoch times."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import gluondist
    import models
    net = models.build(model)
    X, y = models.data(model, BATCH * STEPS * gluondist.kvstore.num_workers())
    timer = EpochTimes()
    gluondist.fit(net, (X, y), epochs=EPOCHS, batch_size=BATCH, seed=5, progress=False,
                  metrics=[], optimizer_params=dict(models.OPTIMIZER),
                  callbacks=[timer.make()], sync_batchnorm=sync == "sync")
    if gluondist.kvstore.rank() == 0:
        with open(out, "w") as f:
            json.dump(timer.times, f)


def job(model: str, arm: str, scratch: str) -> float:
    """One job's median epoch after the first, in seconds."""
    out = os.path.join(scratch, "times.json")
    subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", "-n", "2", "-s", "1",
                    os.path.abspath(__file__), "--worker", model, arm, out], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return statistics.median(json.load(f)[1:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", nargs="+", default=["resnet18_v1", "mobilenetv2_0.25"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the results there")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(*args.worker)
    sys.path.insert(0, HERE)
    from peers import writable_file
    if args.json and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    results = {"command": " ".join(["python", "benchmarks/syncbn.py", *(argv or sys.argv[1:])]),
               "batch": BATCH, "steps": STEPS, "epochs": EPOCHS, "models": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for model in args.models:
            runs = {"sync": [], "local": []}
            for r in range(args.repeats):  # alternating, each first in turn
                order = ("sync", "local") if r % 2 == 0 else ("local", "sync")
                for arm in order:
                    runs[arm].append(job(model, arm, scratch))
            sync, local = (statistics.median(runs[a]) for a in ("sync", "local"))
            results["models"][model] = {**runs, "median_sync": sync, "median_local": local,
                                        "sync_over_local": sync / local}
            print(f"{model}: epoch of {STEPS} steps {sync:.3f} s synchronised, {local:.3f} s "
                  f"each worker's own: {sync / local:.2f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
