"""What a job chooses for its chunk size, and what that costs against the old fixed 512 KiB:
jobs of a model-zoo net's gradients at the defaults (the job chooses) against the same with
``GLUONDIST_CHUNK_BYTES=524288``, alternating, repeated; on this machine (loopback), or with
``--link RATE`` on namespace hosts (one worker each, a server beside each, or ``--dedicated``
on hosts of their own; root).

    python benchmarks/chunk_choice.py [--model resnet18_v1] [--workers 2] [--repeats 5]
        [--steps 20] [--link RATE [--dedicated]] [--json FILE]

Each job (``gluondist launch``, as many servers as workers) makes a trainer of the net's
parameters, which at the defaults runs the probe (gluondist.kv.tuning), then times --steps
sums of its gradients over the job. Reported per job: the size chosen, the probe's table, the time the
trainer took to make (the probe's cost) and the median step; over the repeats, the median of
(a default job's step ÷ the 512 KiB job's step beside it)."""
import argparse
import contextlib
import json
import pathlib
import statistics
import subprocess
import sys
import time

def worker(model: str, steps: int) -> None:
    """(In a job) make the trainer, time ``steps`` sums; worker 0 prints one JSON line."""
    import mxnet as mx
    from gluondist import kvstore
    from gluondist.kv import tuning
    net = mx.gluon.model_zoo.vision.get_model(model, classes=10)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 3, 32, 32)))
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    kvstore.create("dist_sync")
    start = time.perf_counter()
    trainer = kvstore.make_trainer(params, "sgd", kvstore="dist_sync")
    made = time.perf_counter() - start
    for p in params:
        p.grad()[:] = 1
    took = []
    for _ in range(steps + 1):  # the first is not counted
        start = time.perf_counter()
        trainer.allreduce_grads()
        mx.nd.waitall()
        took.append(time.perf_counter() - start)
    if kvstore.rank() == 0:
        print("chunk-choice " + json.dumps({
            "chosen": tuning.chosen(), "probe": tuning.probed(), "make_s": made,
            "step_s": statistics.median(took[1:])}), flush=True)


def job(where: list, args, env: dict) -> dict:
    argv = [sys.executable, "-m", "gluondist.cli", "launch", *where, "-n", str(args.workers),
            "-s", str(args.workers), *(f"--env={k}={v}" for k, v in env.items()), __file__,
            "--worker", args.model, str(args.steps)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900).stdout
    line = next(x for x in out.splitlines() if "chunk-choice " in x)
    return json.loads(line.split("chunk-choice ", 1)[1])


def main():
    if sys.argv[1:2] == ["--worker"]:
        return worker(sys.argv[2], int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--model", default="resnet18_v1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--link", metavar="RATE", help="namespace hosts linked at RATE")
    parser.add_argument("--dedicated", action="store_true",
                        help="with --link: the servers on hosts of their own")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        where = hosts(stack, args) if args.link else []
        runs = measure(where, args)
    report(runs, args)


ARMS = {"default": {}, "512 KiB": {"GLUONDIST_CHUNK_BYTES": "524288"}}


def hosts(stack, args) -> list:
    """``gluondist launch``'s options for the job on namespace hosts linked at --link."""
    from peers import link_hosts, ssh_launch
    cluster = link_hosts(stack, 2 * args.workers if args.dedicated else args.workers,
                         args.link)
    own = cluster.hosts[args.workers:]
    return [*ssh_launch(cluster, cluster.hosts[:args.workers]), "--threads", "1",
            *(["--server-hosts", ",".join(own)] if args.dedicated else [])]


def measure(where, args) -> dict:
    runs = {arm: [] for arm in ARMS}
    for rep in range(args.repeats):
        for arm in (list(ARMS) if rep % 2 == 0 else list(ARMS)[::-1]):
            runs[arm].append(job(where, args, ARMS[arm]))
            r = runs[arm][-1]
            probe = "" if r["probe"] is None else " (probe ms: " + ", ".join(
                f"{int(c) >> 10} KiB {s * 1e3:.1f}" for c, s in r["probe"]["seconds"].items()) + ")"
            print(f"round {rep + 1}, {arm}: chose {r['chosen']}{probe}, made in "
                  f"{r['make_s']:.2f} s, {r['step_s'] * 1e3:.1f} ms a step", flush=True)
    return runs


def report(runs: dict, args) -> None:
    ratios = [a["step_s"] / b["step_s"] for a, b in zip(runs["default"], runs["512 KiB"])]
    result = {"command": "python " + " ".join(sys.argv), "model": args.model,
              "workers": args.workers, "link": args.link, "dedicated": args.dedicated,
              "steps": args.steps, "runs": runs, "step_ratio": statistics.median(ratios),
              "make_s": {arm: statistics.median(r["make_s"] for r in runs[arm])
                         for arm in ARMS}}
    chosen = [r["chosen"] for r in runs["default"]]
    print(f"chosen: {chosen}; a default job's step takes {result['step_ratio']:.3f} of a 512 KiB "
          f"job's; make_trainer {result['make_s']['default']:.2f} s against "
          f"{result['make_s']['512 KiB']:.2f} s", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
