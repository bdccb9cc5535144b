"""What fusing small gradients into shared keys (gluondist.kv.fusion) saves on real nets: a
2-worker, 1-server dist_sync job on this machine trains each model through ``fit`` with the
default (fused) and with ``GLUONDIST_FUSE_BYTES=0`` (each gradient on its own key), the two
alternating, and the median epoch of each is compared. The nets are the model zoo's
(tests/models.py), 3x32x32 inputs, 8 samples a worker a step, 12 steps an epoch, 3 epochs, the
first left out; one OpenMP thread a worker (the launcher's default on 2 cores).

    python benchmarks/fusion.py [--models mobilenetv2_0.25 resnet18_v1] [--repeats 5]
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
BATCH, STEPS, EPOCHS = 8, 12, 3


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


def worker(model: str, out: str, sizes=(BATCH, STEPS, EPOCHS), **fit) -> None:
    """One worker of the job: ``model`` through fit (with ``fit``'s further arguments), at
    ``sizes`` (batch a worker, steps, epochs); worker 0 writes its epoch times."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import gluondist
    import models
    batch, steps, epochs = sizes
    net = models.build(model)
    X, y = models.data(model, batch * steps * gluondist.kvstore.num_workers())
    timer = EpochTimes()
    gluondist.fit(net, (X, y), epochs=epochs, batch_size=batch, seed=5, progress=False,
                  metrics=[], optimizer_params=dict(models.OPTIMIZER),
                  callbacks=[timer.make()], **fit)
    if gluondist.kvstore.rank() == 0:
        with open(out, "w") as f:
            json.dump(timer.times, f)


def job(model: str, fused: bool, scratch: str) -> float:
    """One job's median epoch after the first, in seconds."""
    env = dict(os.environ)
    env.pop("GLUONDIST_FUSE_BYTES", None)
    if not fused:
        env["GLUONDIST_FUSE_BYTES"] = "0"
    return job_epoch(os.path.abspath(__file__), [model], scratch, env)


def job_epoch(script: str, args: list, scratch: str, env=None, launch=()) -> float:
    """The median epoch after the first of a 2-worker, 1-server job of ``script --worker
    ARGS OUT`` (whose worker 0 writes its epoch times to OUT), in seconds; ``launch``: more
    of gluondist launch's options (the hosts)."""
    out = os.path.join(scratch, "times.json")
    subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", *launch, "-n", "2", "-s",
                    "1", script, "--worker", *args, out], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        return statistics.median(json.load(f)[1:])


def alternate(arms, repeats: int, run) -> dict:
    """``{arm: [run(arm) of each repeat]}``, the arms alternating, each first in turn."""
    runs = {arm: [] for arm in arms}
    for r in range(repeats):
        for arm in (arms if r % 2 == 0 else arms[::-1]):
            runs[arm].append(run(arm))
    return runs


def arguments(doc: str, models: list, worker_args: int, argv, link: bool = False):
    """The command line of a benchmark of ``models`` (``--models``, ``--repeats``, ``--json``,
    with ``link`` ``--link``, and its workers' hidden ``--worker`` of ``worker_args``
    values)."""
    parser = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()))
    parser.add_argument("--models", nargs="+", default=models)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the results there")
    if link:
        parser.add_argument("--link", help="run each worker on a namespace host of its own "
                                           "(as root; tests/netns.py), links at this rate "
                                           "(tc's form: 1gbit, 200mbit)")
    parser.add_argument("--worker", nargs=worker_args, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, HERE)
    from peers import writable_file
    if not args.worker and args.json and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    return args


def main(argv=None):
    args = arguments(__doc__, ["mobilenetv2_0.25", "resnet18_v1"], 2, argv)
    if args.worker:
        return worker(*args.worker)
    compare(args, argv, "fusion.py", (BATCH, STEPS, EPOCHS), ("fused", "alone"),
            lambda model, arm, scratch: job(model, arm == "fused", scratch),
            lambda fused, alone: f"{fused:.3f} s fused, {alone:.3f} s each on its own key: "
                                 f"{alone / fused:.2f}x")


def compare(args, argv, script: str, sizes, arms, run, say) -> None:
    """Each model's epochs under the two ``arms`` (``run(model, arm, scratch)``), alternating;
    their medians and the second's over the first's, printed (``say(first, second)``) and
    written to ``--json`` with the ``sizes`` (batch a worker, steps, epochs)."""
    results = {"command": " ".join(["python", f"benchmarks/{script}", *(argv or sys.argv[1:])]),
               "batch": sizes[0], "steps": sizes[1], "epochs": sizes[2],
               "link": getattr(args, "link", None), "models": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for model in args.models:
            runs = alternate(arms, args.repeats, lambda arm: run(model, arm, scratch))
            first, second = (statistics.median(runs[a]) for a in arms)
            results["models"][model] = {**runs, f"median_{arms[0]}": first,
                                        f"median_{arms[1]}": second,
                                        f"{arms[1]}_over_{arms[0]}": second / first}
            print(f"{model}: epoch of {sizes[1]} steps {say(first, second)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)

if __name__ == "__main__":
    main()
