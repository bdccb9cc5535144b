"""One or two threads in MXNet's CPU engine per worker (``MXNET_CPU_WORKER_NTHREADS``; MXNet's
default 1), measured two ways on this machine.

    python benchmarks/engine_threads.py [--models mlp:2 resnet18_v1:2 mobilenet1.0:3]
                                        [--alone resnet18_v1@96 mobilenet1.0@64]
                                        [--rounds 3] [--epochs 6] [--json FILE]

Local jobs: for each MODEL:W, in every round (the arms' order alternating from round to
round), one local ``gluondist launch -n W -s W`` job of benchmarks/peer_train.py's training
through ``fit`` (its MODEL, one OpenMP thread a worker), every process of the job with the
variable at 1 and then at 2. The figure of a job is the median epoch after its first (worker
0's clock); of an arm, the median over the rounds.

Compute alone (``--alone``): one process training MODEL (peer_train.py's net and batch, with
``@SIZE`` inputs) with MXNet's Trainer and no kvstore, its operators on every core
(``OMP_NUM_THREADS`` = the machine's cores), as a worker that has a host to itself runs: the
median of 10 steps after 2, with the variable at 1 and at 2, alternating.

``ratio``: the two-thread arm's time / the one-thread arm's (above 1: two threads are slower).
benchmarks/peers.py measures the same choice across network-namespace hosts (``--variant
t1=MXNET_CPU_WORKER_NTHREADS=1``).
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "peer_train.py")
GLUONDIST = [sys.executable, "-m", "gluondist.cli"]
ZOO_BATCH = 32  # peer_train.py's for a model-zoo net (it sets one OpenMP thread on import)


def job(model: str, workers: int, threads: int, epochs: int, work: str) -> float:
    """The median epoch after the first of one local job with ``threads`` engine threads."""
    out = os.path.join(work, "epochs.json")
    env = {**os.environ, "MXNET_CPU_WORKER_NTHREADS": str(threads)}
    argv = [*GLUONDIST, "launch", "-n", str(workers), "-s", str(workers), sys.executable, TRAIN,
            "gluondist", out, str(epochs), model]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    with open(out) as f:
        return statistics.median(json.load(f)["epoch_seconds"][1:])


ALONE = """
import statistics, sys, time
import mxnet as mx  # OMP_NUM_THREADS from the environment: every core
name, _, size = sys.argv[1].partition("@")
size, batch = int(size or 32), int(sys.argv[2])
net = mx.gluon.model_zoo.vision.get_model(name, classes=10)
net.hybridize(static_alloc=True)
net.initialize(mx.init.Xavier())
trainer = mx.gluon.Trainer(net.collect_params(), "sgd",
                           {"learning_rate": 0.01, "momentum": 0.9}, kvstore=None)
x = mx.nd.random.uniform(shape=(batch, 3, size, size))
y = mx.nd.zeros((batch,))
loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
times = []
for _ in range(12):
    start = time.perf_counter()
    with mx.autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(batch)
    mx.nd.waitall()
    times.append(time.perf_counter() - start)
print(statistics.median(times[2:]))
"""


def step_alone(model: str, settings: dict) -> float:
    """The median step of ``model`` (``NAME@SIZE``, peer_train.py's batch of a model-zoo net)
    in one process with no kvstore, with ``settings`` over this environment (benchmarks/
    backward_bulk.py's too)."""
    done = subprocess.run([sys.executable, "-c", ALONE, model, str(ZOO_BATCH)],
                          env={**os.environ, **settings}, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{model} alone exited {done.returncode}:\n{done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def alone(model: str, threads: int) -> float:
    """``model``'s step on every core, with ``threads`` engine threads."""
    return step_alone(model, {"MXNET_CPU_WORKER_NTHREADS": str(threads),
                              "OMP_NUM_THREADS": str(os.cpu_count())})


def compare(label: str, measure, rounds: int, unit: str) -> dict:
    """``measure(threads)`` with 1 and 2 engine threads, alternating, ``rounds`` times."""
    runs = {1: [], 2: []}
    for r in range(rounds):
        for threads in ((1, 2) if r % 2 == 0 else (2, 1)):
            runs[threads].append(measure(threads))
            print(f"round {r + 1}, {label}, {threads} thread(s): {runs[threads][-1]:.4f} s "
                  f"{unit}", flush=True)
    one, two = statistics.median(runs[1]), statistics.median(runs[2])
    print(f"{label}: {one:.4f} s with one thread, {two:.4f} s with two ({two / one:.3f})",
          flush=True)
    return {"one_thread_s": one, "two_threads_s": two, "ratio": two / one, "rounds": runs}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=["mlp:2", "resnet18_v1:2",
                                                        "mobilenet1.0:3"], metavar="MODEL:W")
    parser.add_argument("--alone", nargs="*", default=["resnet18_v1@96", "mobilenet1.0@64"],
                        metavar="MODEL")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rows, alone_rows = [], []
    with tempfile.TemporaryDirectory() as work:
        for text in args.models:
            model, _, w = text.partition(":")
            w = int(w or 2)
            measure = lambda threads: job(model, w, threads, args.epochs, work)  # noqa: E731
            rows.append({"model": model, "workers": w,
                         **compare(f"{model} W={w}", measure, args.rounds, "an epoch")})
    for model in args.alone:
        alone_rows.append({"model": model, "omp_threads": os.cpu_count(),
                           **compare(f"{model} alone", lambda t: alone(model, t), args.rounds,
                                     "a step")})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": shlex.join(["python", *sys.argv]), "cores": os.cpu_count(),
                       "rows": rows, "alone": alone_rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
