"""Do operators on cpu(0) and cpu(1) run at the same time? MXNet's profiler records when each
operator starts and ends on each device; this prints, for each case, how much of the less busy
device's operator time the other device was busy too (1: fully overlapped, 0: one at a time),
and when the Python call returned, as a share of the whole step (small: the engine had every
operator queued early, so Python's dispatch is not what keeps the devices apart; the naive arm
waits inside, so its share is about 1).

    python benchmarks/pipeline_overlap.py [--micro 4] [--width 1024] [--json PATH]

Cases, each in a process of its own (MXNet reads its environment when it starts):

* chains: two independent chains of 8 FullyConnected operators, one per device, no autograd;
* pipeline: the pipeline's step (benchmarks/pipeline.py), autograd recording, M micro-batches;
* pipeline, no bulking: the same with MXNET_EXEC_BULK_EXEC_TRAIN=0 (MXNet otherwise runs up
  to 15 backward operators of one device as one engine operation, ImperativeBulk);
* naive: the pipeline's stages one micro-batch at a time (benchmarks/pipeline.py)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {"chains": {}, "pipeline": {},
         "pipeline, no bulking": {"MXNET_EXEC_BULK_EXEC_TRAIN": "0"}, "naive": {}}


def overlap(trace: dict) -> dict:
    """Busy time of each device, and the time both were busy, from a profiler trace."""
    open_at, spans = {}, {0: [], 1: []}
    for e in trace["traceEvents"]:
        if e.get("ph") in ("B", "E") and e.get("pid") in (0, 1):
            key = (e["pid"], e["tid"], e["name"])
            if e["ph"] == "B":
                open_at.setdefault(key, []).append(e["ts"])
            elif open_at.get(key):
                spans[e["pid"]].append((open_at[key].pop(), e["ts"]))
    merged = {d: _merge(s) for d, s in spans.items()}
    both = sum(max(0, min(b0, b1) - max(a0, a1))
               for a0, b0 in merged[0] for a1, b1 in merged[1])
    busy = {d: sum(b - a for a, b in m) for d, m in merged.items()}
    return {"cpu0_busy_ms": busy[0] / 1e3, "cpu1_busy_ms": busy[1] / 1e3,
            "both_busy_ms": both / 1e3, "overlap": both / max(1, min(busy.values()))}


def _merge(spans):
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _case(name, micro, width, trace_path) -> float:
    """Run one case under the profiler; returns Python's share of the step's time."""
    import mxnet as mx
    sys.path.insert(0, HERE)
    import pipeline as bench
    if name == "chains":
        x = [mx.nd.random.uniform(shape=(256, width), ctx=mx.cpu(i)) for i in (0, 1)]
        w = [mx.nd.random.uniform(shape=(width, width), ctx=mx.cpu(i)) / width for i in (0, 1)]

        def step():
            for i in (0, 1):
                y = x[i]
                for _ in range(8):
                    y = mx.nd.FullyConnected(y, w[i], num_hidden=width, no_bias=True)
    else:
        arms, _ = bench._arms(argparse.Namespace(width=width, layers=5, batch=256))
        arm = arms[name.split(",")[0]]
        step = lambda: arm(micro)
    for _ in range(2):
        step()
        mx.nd.waitall()
    mx.profiler.set_config(profile_imperative=True, aggregate_stats=False, filename=trace_path)
    mx.profiler.set_state("run")
    pushed = total = 0.0
    for _ in range(3):
        start = time.perf_counter()
        step()
        pushed += time.perf_counter() - start
        mx.nd.waitall()
        total += time.perf_counter() - start
    mx.profiler.set_state("stop")
    mx.profiler.dump()
    return pushed / total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--json", help="write the results there")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one case, in a child process
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps({"python_share": _case(args.case, args.micro, args.width, args.trace)}))
        return
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, env in CASES.items():
            trace = os.path.join(scratch, "trace.json")
            out = subprocess.run([sys.executable, __file__, "--case", name, "--micro",
                                  str(args.micro), "--width", str(args.width), "--trace", trace],
                                 env={**os.environ, **env}, capture_output=True, text=True,
                                 check=True)
            with open(trace) as f:
                results[name] = {**overlap(json.load(f)),
                                 **json.loads(out.stdout.splitlines()[-1])}
            r = results[name]
            print(f"{name:22s} overlap {r['overlap']:.3f}  busy cpu(0) {r['cpu0_busy_ms']:.0f} "
                  f"ms, cpu(1) {r['cpu1_busy_ms']:.0f} ms, both {r['both_busy_ms']:.0f} ms; "
                  f"Python returned after {r['python_share']:.0%} of the step", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"micro": args.micro, "width": args.width, "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
