"""Pipeline parallelism on this machine: K=2 stages on cpu(0) and cpu(1) against naive
stage-after-stage execution and against one device, for M micro-batches, beside GPipe's bubble
model. Also each context's parameter bytes against a per-stage budget.

    python benchmarks/pipeline.py [--micro 1 2 4 8] [--repeats 5] [--json PATH] [--plot PNG]
    python benchmarks/pipeline.py --plot PNG --from benchmarks/results/pipeline.json  # draw only

One training step of an MLP (``--layers`` Dense layers of ``--width``, batch ``--batch``):

* one: the whole net on cpu(0), one forward and backward of the batch;
* naive: the pipeline's stages, each micro-batch's forward and backward run to the end
  (``mx.nd.waitall()``) before the next begins, so no two stages ever work at once;
* pipeline: GPipe's schedule, every micro-batch's forward pushed to the engine, then one
  backward, so stage 1 may work on micro-batch i+1 while stage 2 works on micro-batch i.

The arms alternate (one, naive, pipeline, then reversed) so the shared machine's noise falls on
all alike; each figure is the median over ``--repeats``. The model: a pipeline of K equal stages
takes (M+K-1)/(K*M) of the naive time, a speed-up of at most K*M/(M+K-1).
Before timing, the three arms' gradients are checked equal (within 1e-5 of the largest)."""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

K = 2


def model_speedup(micro: int, stages: int = K) -> float:
    """GPipe's bound on the pipeline's speed-up over naive stage-after-stage execution."""
    return stages * micro / (micro + stages - 1)


def _net(width, layers):
    import mxnet as mx
    net = mx.gluon.nn.HybridSequential()
    for _ in range(layers - 1):
        net.add(mx.gluon.nn.Dense(width, activation="relu", in_units=width))
    net.add(mx.gluon.nn.Dense(10, in_units=width))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    return net


def _arms(args):
    """``{name: fn(micro) -> gradients}`` and the pipeline (for its parameter bytes). A
    function returns when its operators are pushed to MXNet's engine (naive: when done); the
    caller waits (``mx.nd.waitall()``)."""
    import mxnet as mx
    import numpy as np
    from gluondist import parallel
    rs = np.random.RandomState(0)
    X = mx.nd.array(rs.randn(args.batch, args.width))
    y = mx.nd.array(rs.randint(0, 10, args.batch))
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    one, staged = _net(args.width, args.layers), _net(args.width, args.layers)
    for a, b in zip(one.collect_params().values(), staged.collect_params().values()):
        b.set_data(a.data())
    pipe = parallel.Pipeline(staged, [mx.cpu(0), mx.cpu(1)])
    grads = lambda net: [p.list_grad()[0] for p in net.collect_params().values()]

    def run_one(micro):
        one.collect_params().setattr("grad_req", "write")
        with mx.autograd.record():
            loss(one(X), y).backward()
        return grads(one)

    def run_naive(micro):
        staged.collect_params().setattr("grad_req", "add")
        staged.collect_params().zero_grad()
        for part, label in zip(parallel.split(X, [mx.cpu(0)] * micro),
                               parallel.split(y, [mx.cpu(1)] * micro)):
            with mx.autograd.record():
                loss(pipe(part), label).backward()
            mx.nd.waitall()  # the next micro-batch starts when this one is through both stages
        return grads(staged)

    def run_pipeline(micro):
        staged.collect_params().setattr("grad_req", "write")
        pipe.forward_backward(loss, X, y, micro)
        return grads(staged)

    return {"one": run_one, "naive": run_naive, "pipeline": run_pipeline}, pipe


def _check(arms, micro):
    import numpy as np
    got = {name: [g.asnumpy() for g in fn(micro)] for name, fn in arms.items()}
    for name in ("naive", "pipeline"):
        for a, b in zip(got["one"], got[name]):
            # relative 1e-5 of the largest entry: sums of 256 products in another order
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max(),
                                       err_msg=name)


def measure(args) -> dict:
    import mxnet as mx
    arms, pipe = _arms(args)
    rows = []
    for micro in args.micro:
        _check(arms, micro)
        for fn in arms.values():  # warm: MKL-DNN's primitives and memory for these shapes
            fn(micro)
            mx.nd.waitall()
        times = {name: [] for name in arms}
        order = list(arms)
        for rep in range(args.repeats):
            for name in (order if rep % 2 == 0 else order[::-1]):
                start = time.perf_counter()
                for _ in range(args.steps):
                    arms[name](micro)
                    mx.nd.waitall()
                times[name].append((time.perf_counter() - start) / args.steps)
        med = {name: statistics.median(t) for name, t in times.items()}
        rows.append({"micro": micro, "one_s": med["one"], "naive_s": med["naive"],
                     "pipeline_s": med["pipeline"],
                     "speedup": med["naive"] / med["pipeline"],
                     "vs_one": med["one"] / med["pipeline"], "model": model_speedup(micro)})
        print(table_row(rows[-1]), flush=True)
    held = pipe.param_bytes()
    total = sum(held.values())
    budget = int(total * 0.6)  # what each context is given: 60% of the net, which cannot fit
    return {"rows": rows, "param_bytes": held, "total_bytes": total, "budget_bytes": budget,
            "settings": {"width": args.width, "layers": args.layers, "batch": args.batch,
                         "steps": args.steps, "repeats": args.repeats, "cores": os.cpu_count(),
                         "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset")}}


HEADER = ("| M | one device (s/step) | naive (s/step) | pipeline (s/step) | "
          "naive / pipeline | model K·M/(M+K−1) | one / pipeline |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")


def table_row(r) -> str:
    return (f"| {r['micro']} | {r['one_s']:.4f} | {r['naive_s']:.4f} | {r['pipeline_s']:.4f} | "
            f"{r['speedup']:.2f} | {r['model']:.2f} | {r['vs_one']:.2f} |")


def markdown(saved) -> str:
    """The docs' table of a saved run."""
    return "\n".join([HEADER] + [table_row(r) for r in saved["rows"]])


def plot(saved, path) -> None:
    from matplotlib.figure import Figure
    micro = [r["micro"] for r in saved["rows"]]
    fig = Figure(figsize=(6, 3.8))
    ax = fig.subplots()
    ax.plot(micro, [r["model"] for r in saved["rows"]], "--", label="bubble model K·M/(M+K−1)")
    ax.plot(micro, [r["speedup"] for r in saved["rows"]], "o-", label="measured naive / pipeline")
    ax.plot(micro, [r["vs_one"] for r in saved["rows"]], "s:", label="measured one device / "
            "pipeline")
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(micro)
    ax.set_xticklabels([str(m) for m in micro])
    ax.set_ylim(0, max(r["model"] for r in saved["rows"]) * 1.15)
    ax.set_xlabel("micro-batches M (K=2 stages on cpu(0), cpu(1))")
    ax.set_ylabel("speed-up (1: as fast)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--micro", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--json", help="write the results there")
    parser.add_argument("--plot", help="draw the speed-ups against the model there (PNG)")
    parser.add_argument("--from", dest="saved", help="draw from this saved JSON; run nothing")
    args = parser.parse_args(argv)
    sys.path.insert(0, HERE)
    from peers import writable_file
    if args.json and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    if args.saved:
        with open(args.saved) as f:
            saved = json.load(f)
    else:
        print(HEADER, flush=True)
        saved = measure(args)
        held = ", ".join(f"{c} {b / 2 ** 20:.2f} MiB" for c, b in saved["param_bytes"].items())
        print(f"parameters: {saved['total_bytes'] / 2 ** 20:.2f} MiB in all; per context {held}; "
              f"budget per context {saved['budget_bytes'] / 2 ** 20:.2f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(saved, f, indent=1)
    if args.plot:
        plot(saved, args.plot)


if __name__ == "__main__":
    main()
