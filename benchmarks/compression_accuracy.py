"""What compression costs in accuracy: the same fit, in a 2-worker job (2 workers, 1 server,
this machine), with compression=None, 'fp16' and '2bit' (threshold 0.5, MXNet's default, and
0.05: ``2bit:0.05``), on
scikit-learn's digits (1,437 training and 360 validation images), for two models: the MLP of
examples/digits.py and a wide one dominated by one layer (Dense(4096) on the 64 pixels: 87% of
its 307k weights). Every run has the same seed, batch and schedule.

    python benchmarks/compression_accuracy.py [--epochs 15] [--json FILE]

prints a table of the final validation accuracy and loss and the last epoch's samples/s, and
with --json writes every epoch's history (benchmarks/plots.py draws it). Each compression runs
in a job of its own (MXNet keeps 2-bit for the process). Run it from the repository's root; it
starts each job with `gluondist launch` under /tmp/gluondist-heavy.lock.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("none", "fp16", "2bit", "2bit:0.05")
MARK = "compression-accuracy "


def models():
    import mxnet as mx
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from digits import mlp

    def wide():
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Dense(4096, activation="relu"), mx.gluon.nn.Dense(10))
        return net
    return {"digits MLP": mlp, "wide layer": wide}


def compression(kind: str):
    """fit's compression= for a KINDS name."""
    if kind.startswith("2bit:"):
        return {"type": "2bit", "threshold": float(kind.split(":")[1])}
    return None if kind == "none" else kind


def worker(kind: str, epochs: int) -> None:
    """One job's worker: both models with ``kind``; worker 0 prints one JSON line."""
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from digits import data

    import gluondist
    train, val = data()
    found = {}
    for name, make in models().items():
        history = gluondist.fit(make(), train, val_data=val, epochs=epochs, batch_size=32,
                                seed=0, progress=False,
                                optimizer_params={"learning_rate": 0.1, "momentum": 0.9},
                                compression=compression(kind))
        found[name] = {k: history.history[k] for k in
                       ("val_accuracy", "val_loss", "samples_per_s")}
    if gluondist.kvstore.rank() == 0:
        print(MARK + json.dumps({"compression": kind, "models": found}), flush=True)


def run(kind: str, epochs: int) -> dict:
    out = subprocess.run(["flock", "/tmp/gluondist-heavy.lock", sys.executable, "-m",
                          "gluondist.cli", "launch", "-n", "2", "-s", "1", __file__, "--worker",
                          kind, "--epochs", str(epochs)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    line = next(x for x in out.stdout.splitlines() if MARK in x)
    return json.loads(line.split(MARK, 1)[1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.epochs)
    results = [run(kind, args.epochs) for kind in KINDS]
    print(f"{'model':<12} {'compression':<12} {'val acc':>8} {'val loss':>9} {'samples/s':>10}")
    for r in results:
        for name, h in r["models"].items():
            print(f"{name:<12} {r['compression']:<12} {h['val_accuracy'][-1]:>8.4f} "
                  f"{h['val_loss'][-1]:>9.4f} {h['samples_per_s'][-1]:>10.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"epochs": args.epochs, "runs": results}, f, indent=1)


if __name__ == "__main__":
    main()
