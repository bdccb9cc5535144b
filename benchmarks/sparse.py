"""What row-sparse gradients save: a 2-worker, 1-server dist_sync job on this machine trains
an embedding of 1,000,000 rows x 64 (256 MB) under a mean and a Dense layer, with batches of
1,000 random ids a worker (about 1,000 rows touched each), by SGD with momentum through
make_trainer, once with ``Embedding(sparse_grad=True)`` (each step moves the rows the job's
batch touched) and once dense (each step moves the whole table). Worker 0 times each step and
counts the bytes the loopback interface carried meanwhile (``/proc/net/dev``: the whole job's
traffic, both workers' pushes and pulls and the server's answers; run it with nothing else
on loopback); the median step after the first two is reported, the two runs alternating.

    python benchmarks/sparse.py [--rows 1000000] [--repeats 2] [--json FILE]
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
DIM, IDS = 64, 1000
STEPS = {"sparse": 12, "dense": 5}


def loopback() -> int:
    """Bytes the loopback interface has carried."""
    for line in open("/proc/net/dev"):
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])
    raise RuntimeError("no loopback interface in /proc/net/dev")


def worker(mode: str, rows: int, out: str) -> None:
    """One worker: the embedding net, ``STEPS[mode]`` steps; worker 0 writes its figures."""
    import mxnet as mx
    import numpy as np
    from gluondist import kvstore
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Embedding(rows, DIM, sparse_grad=mode == "sparse"))
    net.add(mx.gluon.nn.HybridLambda(lambda F, x: F.mean(x, axis=1)), mx.gluon.nn.Dense(1))
    net.initialize(mx.init.Normal(0.01))
    rs = np.random.RandomState(kvstore.rank())
    net(mx.nd.array(rs.randint(0, rows, (1, 4))))
    trainer = kvstore.make_trainer(net.collect_params(), "sgd",
                                   {"learning_rate": 0.1, "momentum": 0.9})
    times, carried = [], []
    for _ in range(STEPS[mode]):
        ids = mx.nd.array(rs.randint(0, rows, (IDS // 4, 4)))
        before, start = loopback(), time.perf_counter()
        with mx.autograd.record():
            loss = (net(ids) ** 2).sum()
        loss.backward()
        trainer.step(len(ids) * kvstore.num_workers())
        mx.nd.waitall()
        times.append(time.perf_counter() - start)
        carried.append(loopback() - before)
    if kvstore.rank() == 0:
        with open(out, "w") as f:
            json.dump({"seconds": times, "bytes": carried}, f)


def job(mode: str, rows: int, scratch: str) -> dict:
    out = os.path.join(scratch, f"{mode}.json")
    subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", "-n", "2", "-s", "1",
                    os.path.abspath(__file__), "--worker", mode, str(rows), out], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)
    with open(out) as f:
        found = json.load(f)
    return {k: statistics.median(v[2:]) for k, v in found.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rows", type=int, default=1000000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="write the results there")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker[0], int(args.worker[1]), args.worker[2])
    sys.path.insert(0, HERE)
    from peers import writable_file
    if args.json and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    runs = {"sparse": [], "dense": []}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.repeats):  # alternating, each first in turn
            for mode in (("sparse", "dense") if r % 2 == 0 else ("dense", "sparse")):
                runs[mode].append(job(mode, args.rows, scratch))
    medians = {m: {k: statistics.median(run[k] for run in v) for k in v[0]}
               for m, v in runs.items()}
    sparse, dense = medians["sparse"], medians["dense"]
    results = {"command": " ".join(["python", "benchmarks/sparse.py", *(argv or sys.argv[1:])]),
               "rows": args.rows, "dim": DIM, "ids_a_worker": IDS, "runs": runs,
               "median": medians,
               "dense_over_sparse": {k: dense[k] / sparse[k] for k in sparse}}
    for mode, m in medians.items():
        print(f"{mode}: {m['seconds'] * 1e3:.1f} ms a step, {m['bytes'] / 1e6:.2f} MB on "
              "loopback a step", flush=True)
    print("dense / sparse: " + ", ".join(f"{k} {v:.0f}x"
                                         for k, v in results["dense_over_sparse"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
