"""What issuing a step's chunks costs a worker's Python: the step's MXNet calls prepared once
(gluondist._mx.Copy and PushPull) against MXNet's own Python wrappers (``NDArray.copyto``,
``KVStore.pushpull``), alternating in one job.

    python benchmarks/issue_cost.py [--chunk-bytes 65536] [--blocks 6] [--json FILE]

A 2-worker, 2-server ``gluondist launch`` job on this machine (loopback), benchmarks/peers.py's
net (peer_train.py: one 8 MB layer, 64 samples a worker, SGD with momentum), its gradients in
chunks of ``--chunk-bytes``. Each step is timed twice, after the forward and backward pass
have ended: the ``TrainStep`` call, which only issues the step's copies, pushpulls and updates
to MXNet's engine (the Python's time), and to the end of the step (``mx.nd.waitall()``).
After a block of 10 steps to warm up, ``--blocks`` blocks of 10 steps alternate between the
two ways of making the calls, starting with the wrappers; the figures are the medians over the
steps of each way."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 10  # a block


def worker(out: str, blocks: int) -> None:
    sys.path.insert(0, HERE)
    import peer_train  # sets OMP_NUM_THREADS before MXNet starts
    mx = peer_train.mx
    from gluondist import kvstore as kvs
    from gluondist.kv.compression import Compression

    prepared = Compression.copy
    wrapper = lambda self, name, src, dst: src.copyto(dst)
    net = peer_train.net()
    net.initialize(mx.init.Xavier())
    X, y = peer_train.data(1)
    x, label = mx.nd.array(X[:peer_train.BATCH]), mx.nd.array(y[:peer_train.BATCH])
    net(x)
    kv = kvs.create("dist_sync")
    trainer = kvs.make_trainer(net.collect_params(), "sgd", dict(peer_train.OPT), kv)
    step = kvs.TrainStep(trainer, kv, [mx.cpu()], peer_train.BATCH)
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    times = {"wrappers": {"issue_s": [], "step_s": []},
             "prepared": {"issue_s": [], "step_s": []}}
    for block in range(blocks + 1):  # the first to warm up
        way = "prepared" if block % 2 == 0 else "wrappers"
        Compression.copy = prepared if way == "prepared" else wrapper
        trainer.exchange._prepared = way == "prepared"  # else kv.pushpull
        for _ in range(STEPS):
            with mx.autograd.record():
                loss = loss_fn(net(x), label)
            loss.backward()
            mx.nd.waitall()
            started = time.perf_counter()
            step(peer_train.BATCH * kvs.num_workers())
            issued = time.perf_counter()
            mx.nd.waitall()
            if block:
                times[way]["issue_s"].append(issued - started)
                times[way]["step_s"].append(time.perf_counter() - started)
    Compression.copy = prepared
    if kvs.rank() == 0:
        with open(out, "w") as f:
            json.dump(times, f)


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--chunk-bytes", type=int, default=1 << 16)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", "-n", "2", "-s", "2",
                        "--env", f"GLUONDIST_CHUNK_BYTES={args.chunk_bytes}", __file__,
                        "--worker", out, str(args.blocks)], check=True, timeout=900)
        with open(out) as f:
            times = json.load(f)
    result = {"command": "python " + " ".join(sys.argv), "chunk_bytes": args.chunk_bytes,
              "load_1min": os.getloadavg()[0], "steps_per_way": len(times["prepared"]["issue_s"])}
    for way, values in times.items():
        result[way] = {k: statistics.median(v) for k, v in values.items()}
        print(f"{way}: issuing a step {1e3 * result[way]['issue_s']:.2f} ms, the step "
              f"{1e3 * result[way]['step_s']:.2f} ms")
    result["issue_ratio"] = result["prepared"]["issue_s"] / result["wrappers"]["issue_s"]
    print(f"prepared calls issue a step in {result['issue_ratio']:.2f} of the wrappers' time")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]))
    else:
        main()
