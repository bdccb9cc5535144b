"""What row-sparse gradients save: a 2-worker, 1-server dist_sync job trains an embedding of
1,000,000 rows x 64 (256 MB) under a mean and a Dense layer, with batches of 1,000 random ids a
worker (about 1,000 rows touched each), by SGD with momentum through make_trainer, once with
``Embedding(sparse_grad=True)`` (each step moves the rows the job's batch touched) and once
dense (each step moves the whole table); the arms alternate, the median step after the first
two is reported; one OpenMP thread a worker.

On this machine, every process on loopback, worker 0 counts the bytes loopback carried during
each step (``/proc/net/dev``: the whole job's traffic; run it with nothing else on loopback).
With ``--link RATE`` (as root), each worker runs on a namespace host of its own (tests/netns.py;
the server on the first), links shaped to RATE, and a step's bytes are what the two hosts
sent onto their links. ``--horovod-python PY`` (with ``--link``) adds Horovod's arm on the same
hosts: ``horovod.mxnet.DistributedTrainer`` under ``horovodrun --gloo``, the dense net (its
MXNet binding has no row-sparse path); PY as benchmarks/peers.py's.

    python benchmarks/sparse.py [--rows 1000000] [--repeats 2] [--link 1gbit]
                                [--horovod-python PY] [--json FILE]
"""
import argparse
import contextlib
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
STEPS = {"sparse": 12, "dense": 5, "horovod": 5}


def sent(interface: str) -> int:
    """Bytes ``interface`` has sent (on loopback, every byte any process here sent)."""
    for line in open("/proc/net/dev"):
        name, _, counters = line.partition(":")
        if name.strip() == interface:
            return int(counters.split()[8])
    raise RuntimeError(f"no interface {interface} in /proc/net/dev")


def worker(mode: str, rows: int, out: str, interface: str) -> None:
    """One worker: the embedding net, ``STEPS[mode]`` steps; each worker writes its step
    times and bytes to OUT.<rank>."""
    os.environ["OMP_NUM_THREADS"] = "1"  # before MXNet starts its pool: the same on each side
    import mxnet as mx
    import numpy as np
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Embedding(rows, DIM, sparse_grad=mode == "sparse"))
    net.add(mx.gluon.nn.HybridLambda(lambda F, x: F.mean(x, axis=1)), mx.gluon.nn.Dense(1))
    net.initialize(mx.init.Normal(0.01))
    optimizer = {"learning_rate": 0.1, "momentum": 0.9}
    if mode == "horovod":
        import horovod.mxnet as hvd
        hvd.init()
        rank, scale = hvd.rank(), 1  # DistributedTrainer averages over the workers itself
    else:
        from gluondist import kvstore
        rank, scale = kvstore.rank(), kvstore.num_workers()
    rs = np.random.RandomState(rank)
    net(mx.nd.array(rs.randint(0, rows, (1, 4))))
    if mode == "horovod":
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", optimizer)
    else:
        trainer = kvstore.make_trainer(net.collect_params(), "sgd", optimizer)
    times, carried = [], []
    for _ in range(STEPS[mode]):
        ids = mx.nd.array(rs.randint(0, rows, (IDS // 4, 4)))
        before, start = sent(interface), time.perf_counter()
        with mx.autograd.record():
            loss = (net(ids) ** 2).sum()
        loss.backward()
        trainer.step(len(ids) * scale)
        mx.nd.waitall()
        times.append(time.perf_counter() - start)
        carried.append(sent(interface) - before)
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"seconds": times, "bytes": carried}, f)


def job(mode: str, rows: int, scratch: str, hosts=None) -> dict:
    """A job's median step after the first two: worker 0's seconds, and the bytes (loopback's
    as worker 0 counted them; on ``hosts``, both hosts' links summed)."""
    out = os.path.join(scratch, f"{mode}.json")
    interface = "lo" if hosts is None else "eth0"
    argv = [os.path.abspath(__file__), "--worker", mode, str(rows), out, interface]
    if mode == "horovod":
        from peers import horovod_run
        horovod_run(hosts.cluster, tempfile.mkdtemp(dir=scratch), hosts.horovod, 2, argv)
    else:
        launch = () if hosts is None else hosts.launch
        subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", *launch, "-n", "2",
                        "-s", "1", *argv], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    found = []
    for rank in (0, 1):
        with open(f"{out}.{rank}") as f:
            found.append(json.load(f))
    counted = found[:1] if hosts is None else found
    return {"seconds": statistics.median(found[0]["seconds"][2:]),
            "bytes": statistics.median(sum(c["bytes"][i] for c in counted)
                                       for i in range(2, len(found[0]["bytes"])))}


class Hosts:
    """Two namespace hosts linked at ``rate``, and how each side launches on them."""

    def __init__(self, stack, rate: str, horovod: str = None):
        from peers import link_hosts, ssh_launch
        self.cluster = link_hosts(stack, 2, rate)
        self.horovod = horovod
        self.launch = (*ssh_launch(self.cluster, self.cluster.hosts), "--threads", "1")


def arguments(argv):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rows", type=int, default=1000000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--link", metavar="RATE", help="workers on namespace hosts, links at "
                        "RATE (tc's form: 1gbit, 200mbit); as root")
    parser.add_argument("--horovod-python", metavar="PY", help="with --link: Horovod's arm too")
    parser.add_argument("--json", help="write the results there")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    sys.path.insert(0, HERE)
    from peers import writable_file
    if args.json and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    if args.horovod_python and not args.link:
        parser.error("--horovod-python: give --link RATE too (Horovod runs on the namespace "
                     "hosts)")
    if args.horovod_python and not os.access(os.path.join(os.path.dirname(
            args.horovod_python), "horovodrun"), os.X_OK):
        parser.error(f"--horovod-python {args.horovod_python}: no horovodrun beside it; give "
                     "the Python of a venv with horovod.mxnet (docs/measured.md)")
    return args


def main(argv=None):
    args = arguments(argv)
    if args.worker:
        return worker(args.worker[0], int(args.worker[1]), *args.worker[2:])
    modes = ("sparse", "dense") + (("horovod",) if args.horovod_python else ())
    runs = {m: [] for m in modes}
    with contextlib.ExitStack() as stack:
        hosts = Hosts(stack, args.link, args.horovod_python) if args.link else None
        scratch = stack.enter_context(tempfile.TemporaryDirectory())
        for r in range(args.repeats):  # alternating, each first in turn
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                runs[mode].append(job(mode, args.rows, scratch, hosts))
    medians = {m: {k: statistics.median(run[k] for run in v) for k in v[0]}
               for m, v in runs.items()}
    sparse = medians["sparse"]
    results = {"command": " ".join(["python", "benchmarks/sparse.py", *(argv or sys.argv[1:])]),
               "rows": args.rows, "dim": DIM, "ids_a_worker": IDS, "link": args.link,
               "runs": runs, "median": medians,
               **{f"{m}_over_sparse": {k: medians[m][k] / sparse[k] for k in sparse}
                  for m in modes[1:]}}
    for mode, m in medians.items():
        print(f"{mode}: {m['seconds'] * 1e3:.1f} ms a step, {m['bytes'] / 1e6:.2f} MB on the "
              "wire a step", flush=True)
    for m in modes[1:]:
        print(f"{m} / sparse: " + ", ".join(f"{k} {v:.0f}x"
                                             for k, v in results[f"{m}_over_sparse"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
