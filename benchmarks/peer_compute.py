"""Where an epoch of benchmarks/peers.py's colocated servers goes, against 1.05 times
Horovod's speed (issue 34's target), from this machine's timings and the saved runs.

    python benchmarks/peer_compute.py [--repeats 50] [--json FILE]

Times, on this machine with nothing else running, peer_train.py's net and settings (one
OpenMP thread): the forward and backward pass of one step's 64 samples, and SGD with
momentum's update of its parameters; the median of ``--repeats`` of each. The next step's
forward starts only when the update has written the weights, so the passes never overlap the
links; the update does, chunk by chunk, as each sum comes back (gluondist.kv.updates), where
with GLUONDIST_CHUNK_UPDATES=0 it starts only after the step's last pull.

Then, at W = 3 and 4 workers with a server on each worker's host, 10 steps of: the kvstore
alone moving the net's bytes (benchmarks/results/workers_64k.json's colocated row, scaled
from its 8 MiB to the net's bytes), and the same at that row's raw TCP rate; plus the passes
that do not overlap the links (``floor_s``: the forward and backward pass; ``floor_late_s``:
and the update, after the last pull), on cores of its own; against the measured epochs (S=W,
and its ``late`` variant where the saved run has one) and Horovod's in
benchmarks/results/peers.json.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer_train  # noqa: E402  (sets OMP_NUM_THREADS before MXNet starts)

mx, np = peer_train.mx, peer_train.np
RESULTS = os.path.join(HERE, "results")


def phases(repeats: int) -> dict:
    """Median seconds of the forward and backward pass, and of the update, of one step."""
    net = peer_train.net()
    net.initialize(mx.init.Xavier())
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", dict(peer_train.OPT), kvstore=None)
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    X, y = peer_train.data(1)
    x, label = mx.nd.array(X[:peer_train.BATCH]), mx.nd.array(y[:peer_train.BATCH])
    times = {"forward_backward_s": [], "update_s": []}
    for i in range(repeats + 3):  # 3 to warm up
        started = time.perf_counter()
        with mx.autograd.record():
            loss = loss_fn(net(x), label)
        loss.backward()
        mx.nd.waitall()
        passed = time.perf_counter()
        trainer.update(peer_train.BATCH)
        mx.nd.waitall()
        if i >= 3:
            times["forward_backward_s"].append(passed - started)
            times["update_s"].append(time.perf_counter() - passed)
    return {k: statistics.median(v) for k, v in times.items()}


def floors(step: dict) -> list:
    with open(os.path.join(RESULTS, "workers_64k.json")) as f:
        workers = json.load(f)
    with open(os.path.join(RESULTS, "peers.json")) as f:
        peers = json.load(f)
    net_bytes = 4 * sum(int(np.prod(p.shape)) for p in peer_train.net().collect_params().values())
    scale = net_bytes / (workers["mbytes"] * 2 ** 20)
    out = []
    for count in (3, 4):
        row = next(r for r in workers["rows"]
                   if r["workers"] == count and r["layout"] == "colocated")
        kv = row["step_s"]
        horovod = next(r["epoch_s"] for r in peers["rows"]
                       if r["workers"] == count and r["arm"] == "horovod")
        measured = {r["arm"]: r["epoch_s"] for r in peers["rows"] if r["workers"] == count}
        floor = peer_train.STEPS * (kv * scale + step["forward_backward_s"])
        late = floor + peer_train.STEPS * step["update_s"]
        out.append({"workers": count, "kvstore_epoch_s": peer_train.STEPS * kv * scale,
                    "raw_tcp_epoch_s": peer_train.STEPS * kv * row["link_efficiency"] * scale,
                    "floor_s": floor, "floor_late_s": late, "target_s": horovod / 1.05,
                    "measured_s": measured["gluondist S=W"],
                    "measured_late_s": measured.get("gluondist S=W late"),
                    "horovod_s": horovod, "floor_horovod_speed_ratio": horovod / floor,
                    "floor_late_horovod_speed_ratio": horovod / late})
    return out


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    step = phases(args.repeats)
    result = {"command": "python " + " ".join(sys.argv), "load_1min": os.getloadavg()[0],
              **step, "floors": floors(step)}
    print(f"forward and backward {1e3 * step['forward_backward_s']:.2f} ms, "
          f"update {1e3 * step['update_s']:.2f} ms a step")
    for row in result["floors"]:
        print(f"W={row['workers']}: the bytes at raw TCP {row['raw_tcp_epoch_s']:.2f} s an "
              f"epoch, the kvstore alone {row['kvstore_epoch_s']:.2f} s, with the forward and "
              f"backward passes {row['floor_s']:.2f} s, and the update after the last pull "
              f"{row['floor_late_s']:.2f} s; 1.05x Horovod needs {row['target_s']:.2f} s, "
              f"measured {row['measured_s']:.2f} s (Horovod {row['horovod_s']:.2f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
