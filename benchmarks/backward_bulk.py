"""What a worker's passes cost with backward's operations run one by one
(``MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD=0``, what ``gluondist launch`` sets for its workers)
against MXNet's default, 15 run as one, on this machine.

    python benchmarks/backward_bulk.py [--models resnet18_v1@32 resnet18_v1@96 mobilenet1.0@32]
                                       [--threads 1 2] [--rounds 5] [--json FILE]

For each MODEL (``NAME@SIZE``: a model-zoo net with 10 classes and 3 x SIZE x SIZE inputs,
hybridized, peer_train.py's 32 samples a step) and each OpenMP thread count: one process
training it with MXNet's Trainer and no kvstore, the median of 10 steps after 2 (forward,
backward, update, then ``waitall``), with the variable at 15 and at 0, alternating from round
to round. An arm's figure is the median over the rounds; ``ratio``: 0's / 15's (above 1: one by
one is slower). The gain it buys, pushes that overlap backward, is measured across hosts by
benchmarks/peers.py (docs/servers.md, "Overlap with backward").
"""
import argparse
import json
import os
import shlex
import statistics
import sys

from engine_threads import step_alone

BULK = "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD"


def step(model: str, bulk: int, threads: int) -> float:
    return step_alone(model, {BULK: str(bulk), "OMP_NUM_THREADS": str(threads)})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", metavar="MODEL",
                        default=["resnet18_v1@32", "resnet18_v1@96", "mobilenet1.0@32"])
    parser.add_argument("--threads", nargs="*", type=int, default=[1, os.cpu_count()])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rows = []
    for model in args.models:
        for threads in args.threads:
            runs = {15: [], 0: []}
            for r in range(args.rounds):
                for bulk in ((15, 0) if r % 2 == 0 else (0, 15)):
                    runs[bulk].append(step(model, bulk, threads))
            bulked, single = statistics.median(runs[15]), statistics.median(runs[0])
            print(f"{model}, {threads} thread(s): {bulked * 1e3:.1f} ms a step bulked, "
                  f"{single * 1e3:.1f} ms one by one ({single / bulked:.3f})", flush=True)
            rows.append({"model": model, "omp_threads": threads, "bulked_s": bulked,
                         "one_by_one_s": single, "ratio": single / bulked,
                         "rounds": {str(k): v for k, v in runs.items()}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": shlex.join(["python", *sys.argv]), "cores": os.cpu_count(),
                       "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
