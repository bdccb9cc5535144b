"""Do operators on cpu(0) and cpu(1) run at the same time? MXNet's profiler records when each
operator starts and ends on each device; this prints, for each case, how much of the less busy
device's operator time the other device was busy too (1: fully overlapped, 0: one at a time),
and when the Python call returned, as a share of the whole step (small: the engine had every
operator queued early, so Python's dispatch is not what keeps the devices apart; the naive arm
waits inside, so its share is about 1).

    python benchmarks/pipeline_overlap.py [--micro 4] [--width 1024] [--temp-copies 64]
                                          [--json PATH]

Cases, each in a process of its own (MXNet reads its environment when it starts):

* held back: a slow FullyConnected on cpu(0), three small ones on cpu(0) behind it, then a small
  one on cpu(1) that shares nothing with them; prints when the cpu(1) one began, as a share
  of the slow one's time (about 1: cpu(1) waited for cpu(0)). Every CPU context draws its
  temporary workspace from one round-robin set of MXNET_CPU_TEMP_COPY copies (default 4; MXNet's
  src/resource.cc), and an operator that takes a copy writes it, so it waits for the last
  operator, on any CPU context, that took the same copy;
* chains: two independent chains of 8 FullyConnected operators, one per device, no autograd;
* pipeline: the pipeline's step (benchmarks/pipeline.py), autograd recording, M micro-batches;
* pipeline, no bulking: the same with MXNET_EXEC_BULK_EXEC_TRAIN=0 (MXNet otherwise runs up
  to 15 backward operators of one device as one engine operation, ImperativeBulk);
* naive: the pipeline's stages one micro-batch at a time (benchmarks/pipeline.py);
* the first three again with MXNET_CPU_TEMP_COPY=--temp-copies (a copy per operator in flight);
* pipeline, paced: with those copies, stage 1's micro-batch i+1 pushed once its micro-batch i
  is done, beside stage 2's micro-batch i (the backward as the pipeline's: one over all).
* pipeline with MXNET_CPU_WORKER_NTHREADS=2 (two worker threads per context), without and with
  the copies.

For the pipeline cases it also prints how much of stage 1's forward work was done before
micro-batch 0 crossed to stage 2 (1: none of stage 2's forward could overlap stage 1's; the
engine runs each device's ready operators first come, first served, so with every micro-batch
pushed at once stage 1 goes layer by layer over all micro-batches; 1/M: micro-batch by one)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = {"held back": {}, "chains": {}, "pipeline": {},
        "pipeline, no bulking": {"MXNET_EXEC_BULK_EXEC_TRAIN": "0"}, "naive": {}}
WITH_COPIES = ["held back", "chains", "pipeline", "pipeline, paced"]
FORWARD = ("FullyConnected", "Activation")


def cases(temp_copies: int) -> dict:
    """``{name: environment}``: the base cases, then some again with more temporary copies."""
    copies = {"MXNET_CPU_TEMP_COPY": str(temp_copies)}
    more = {f"{name}, {temp_copies} temp copies": copies for name in WITH_COPIES}
    two = {"MXNET_CPU_WORKER_NTHREADS": "2"}  # two worker threads per context
    return {**BASE, **more, "pipeline, 2 workers": two,
            f"pipeline, {temp_copies} temp copies, 2 workers": {**copies, **two}}


def overlap(trace: dict) -> dict:
    """Busy time of each device, and the time both were busy, from a profiler trace."""
    spans = _spans(trace)
    merged = {d: _merge([(a, b) for a, b, _ in s]) for d, s in spans.items()}
    both = sum(max(0, min(b0, b1) - max(a0, a1))
               for a0, b0 in merged[0] for a1, b1 in merged[1])
    busy = {d: sum(b - a for a, b in m) for d, m in merged.items()}
    return {"cpu0_busy_ms": busy[0] / 1e3, "cpu1_busy_ms": busy[1] / 1e3,
            "both_busy_ms": both / 1e3, "overlap": both / max(1, min(busy.values()))}


def crossed(trace: dict) -> float:
    """Share of stage 1's (cpu(0)'s) forward operators that ended before the step's first copy
    to stage 2 began, averaged over the steps (each begins with a ``_zeros`` on cpu(0))."""
    steps, shares = [], []
    for _, _, name in sorted(_spans(trace)[0]):
        if name == "_zeros":
            steps.append([])
        elif steps:
            steps[-1].append(name)
    for ops in steps:
        forward = [i for i, name in enumerate(ops) if name in FORWARD]
        if not forward:
            continue
        copy = next((i for i in range(forward[0], len(ops)) if ops[i] == "CopyCPU2CPU"), None)
        before = sum(1 for i in forward if copy is None or i < copy)
        shares.append(before / len(forward))
    return sum(shares) / len(shares) if shares else float("nan")


def _spans(trace):
    open_at, spans = {}, {0: [], 1: []}
    for e in trace["traceEvents"]:
        if e.get("ph") in ("B", "E") and e.get("pid") in (0, 1):
            key = (e["pid"], e["tid"], e["name"])
            if e["ph"] == "B":
                open_at.setdefault(key, []).append(e["ts"])
            elif open_at.get(key):
                spans[e["pid"]].append((open_at[key].pop(), e["ts"], e["name"]))
    return spans


def _merge(spans):
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def held_back(trace: dict) -> float:
    """When the small cpu(1) operator of the "held back" case began, after the slow cpu(0) one
    began, as a share of the slow one's time (about 1: it waited for it); median of the steps.
    From the profiler's trace: ``wait_to_read`` cannot tell, as MXNet's WaitForVar pushes its
    notice onto cpu(0)'s queue, behind the slow operator (src/engine/threaded_engine.cc)."""
    spans = {d: sorted(s) for d, s in _spans(trace).items()}
    slow, after_zeros = [], False
    for a, b, name in spans[0]:
        if name == "_zeros":
            after_zeros = True
        elif name == "FullyConnected" and after_zeros:
            slow.append((a, b))
            after_zeros = False
    small = [a for a, _, name in spans[1] if name == "FullyConnected"]
    shares = sorted((s - a) / (b - a) for (a, b), s in zip(slow, small))
    return shares[len(shares) // 2]


def _held_back_step(n: int = 2048, small: int = 3):
    """A slow FullyConnected on cpu(0), ``small`` small ones on cpu(0) behind it, and a small
    one on cpu(1) that reads and writes nothing the cpu(0) operators touch."""
    import mxnet as mx
    fc = lambda x, w: mx.nd.FullyConnected(x, w, num_hidden=w.shape[0], no_bias=True)
    big = [mx.nd.ones((n, n), ctx=mx.cpu(0)) for _ in range(2)]
    tiny = [[mx.nd.ones(shape, ctx=mx.cpu(i)) for shape in ((4, 8), (8, 8))] for i in (0, 1)]

    def step():
        fc(*big)
        for _ in range(small):
            fc(*tiny[0])
        fc(*tiny[1])
    return step


def _step(name, micro, width):
    """The case's step: a function that pushes one step's operators."""
    import mxnet as mx
    sys.path.insert(0, HERE)
    import pipeline as bench
    if name.startswith("held back"):
        return _held_back_step()
    if name.startswith("chains"):
        x = [mx.nd.random.uniform(shape=(256, width), ctx=mx.cpu(i)) for i in (0, 1)]
        w = [mx.nd.random.uniform(shape=(width, width), ctx=mx.cpu(i)) / width for i in (0, 1)]

        def step():
            for i in (0, 1):
                y = x[i]
                for _ in range(8):
                    y = mx.nd.FullyConnected(y, w[i], num_hidden=width, no_bias=True)
        return step
    arms, pipe = bench._arms(argparse.Namespace(width=width, layers=5, batch=256))
    if name.startswith("pipeline, paced"):
        return lambda: _paced(pipe, micro, width)
    arm = arms[name.split(",")[0]]
    return lambda: arm(micro)


def _paced(pipe, micro, width):
    """The pipeline's step (the same batch, parts and loss as benchmarks/pipeline.py), its
    forward pushed micro-batch by micro-batch: stage 1's part i+1 once its part i is done."""
    import mxnet as mx
    import numpy as np
    from gluondist import parallel
    rs = np.random.RandomState(0)
    where = [pipe.output_context] * micro
    xs = parallel.split(mx.nd.array(rs.randn(256, width)), where)
    ys = parallel.split(mx.nd.array(rs.randint(0, 10, 256)), where)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()

    def stage(k, x):
        x = x.as_in_context(pipe.contexts[k])
        for block in pipe.stages[k]:
            x = block(x)
        return x
    pipe.net.collect_params().setattr("grad_req", "write")
    heads = []
    with mx.autograd.record():
        ahead = stage(0, xs[0])
        for i in range(micro):
            ahead.wait_to_read()  # stage 1's part i is done: only now push its part i+1
            done, ahead = ahead, stage(0, xs[i + 1]) if i + 1 < micro else None
            heads.append(loss(stage(1, done), ys[i]))
    mx.autograd.backward(heads)


def _case(name, micro, width, trace_path) -> dict:
    """Run one case under the profiler: Python's share of the step's time."""
    import mxnet as mx
    step = _step(name, micro, width)
    for _ in range(2):
        step()
        mx.nd.waitall()
    mx.profiler.set_config(profile_imperative=True, aggregate_stats=False, filename=trace_path)
    mx.profiler.set_state("run")
    pushed = total = 0.0
    for _ in range(3):
        mx.nd.zeros((1,), ctx=mx.cpu(0)).wait_to_read()  # marks the step's start in the trace
        start = time.perf_counter()
        step()
        pushed += time.perf_counter() - start
        mx.nd.waitall()
        total += time.perf_counter() - start
    mx.profiler.set_state("stop")
    mx.profiler.dump()
    return {"python_share": pushed / total}


def _report(name, r) -> str:
    if "held_back" in r:
        return (f"{name:36s} cpu(1)'s small operator began after {r['held_back']:.2f} "
                "of cpu(0)'s slow one")
    line = (f"{name:36s} overlap {r['overlap']:.3f}  busy cpu(0) {r['cpu0_busy_ms']:.0f} ms, "
            f"cpu(1) {r['cpu1_busy_ms']:.0f} ms, both {r['both_busy_ms']:.0f} ms; Python "
            f"returned after {r['python_share']:.0%} of the step")
    if "crossed" in r:
        line += f"; micro-batch 0 crossed after {r['crossed']:.0%} of stage 1's forward"
    return line


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--temp-copies", type=int, default=64,
                        help="MXNET_CPU_TEMP_COPY of the cases that set it (MXNet's default: 4)")
    parser.add_argument("--json", help="write the results there")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one case, in a child process
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(_case(args.case, args.micro, args.width, args.trace)))
        return
    sys.path.insert(0, HERE)
    from peers import writable_file
    if args.json and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, env in cases(args.temp_copies).items():
            trace = os.path.join(scratch, f"trace{len(results)}.json")
            out = subprocess.run([sys.executable, __file__, "--case", name, "--micro",
                                  str(args.micro), "--width", str(args.width), "--trace", trace],
                                 env={**os.environ, **env}, capture_output=True, text=True,
                                 check=True)
            results[name] = json.loads(out.stdout.splitlines()[-1])
            if os.path.exists(trace):
                with open(trace) as f:
                    found = json.load(f)
                results[name].update(overlap(found))
                if name.startswith("held back"):
                    results[name]["held_back"] = held_back(found)
                elif not name.startswith("chains"):
                    results[name]["crossed"] = crossed(found)
            print(_report(name, results[name]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"micro": args.micro, "width": args.width,
                       "temp_copies": args.temp_copies, "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
