"""Does pacing the pipeline's forward let cpu(0) and cpu(1) overlap? One process, three arms
of the pipeline's step (benchmarks/pipeline.py's net: 5 Dense layers of 1,024, batch 256, K=2
stages on cpu(0) and cpu(1)), timed alternately; prints naive's time over each arm's:

* naive: each micro-batch's forward (and backward) through both stages, then wait;
* eager: every micro-batch's forward pushed at once, then one backward (the pipeline's schedule,
  gluondist.parallel.Pipeline.forward_backward);
* paced: stage 1's micro-batch i+1 pushed only once its micro-batch i is done, beside stage 2's
  micro-batch i; then one backward as eager's.

MXNet's engine runs each CPU context's ready operators first come, first served, so with every
micro-batch pushed at once stage 1 works layer by layer across all of them and micro-batch 0
reaches stage 2 late (see benchmarks/pipeline_overlap.py). Set MXNET_CPU_TEMP_COPY (e.g. 64)
before it starts, or the contexts also wait on each other's temporary workspaces.

    MXNET_CPU_TEMP_COPY=64 python benchmarks/pipeline_paced.py [--micro 8] [--repeats 5]"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def arms(micro: int, width: int = 1024):
    """``{name: fn(forward_only)}``; each pushes one step (naive waits inside)."""
    import mxnet as mx
    import numpy as np
    import pipeline as bench
    from gluondist import parallel
    rs = np.random.RandomState(0)
    c0, c1 = mx.cpu(0), mx.cpu(1)
    xs = [p.as_in_context(c0) for p in parallel.split(mx.nd.array(rs.randn(256, width)),
                                                       [c0] * micro)]
    ys = parallel.split(mx.nd.array(rs.randint(0, 10, 256)), [c1] * micro)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    pipe = parallel.Pipeline(bench._net(width, 5), [c0, c1])
    pipe.net.collect_params().setattr("grad_req", "add")

    def stage(k, x):
        x = x.as_in_context(pipe.contexts[k])
        for block in pipe.stages[k]:
            x = block(x)
        return x

    def naive(forward_only):
        for x, y in zip(xs, ys):
            with mx.autograd.record():
                head = loss(stage(1, stage(0, x)), y)
            if not forward_only:
                head.backward()
            mx.nd.waitall()

    def eager(forward_only):
        with mx.autograd.record():
            heads = [loss(stage(1, stage(0, x)), y) for x, y in zip(xs, ys)]
        if not forward_only:
            mx.autograd.backward(heads)

    def paced(forward_only):
        heads = []
        with mx.autograd.record():
            ahead = stage(0, xs[0])
            for i in range(micro):
                ahead.wait_to_read()  # on cpu(0): stage 1's micro-batch i is done
                done, ahead = ahead, stage(0, xs[i + 1]) if i + 1 < micro else None
                heads.append(loss(stage(1, done), ys[i]))
        if not forward_only:
            mx.autograd.backward(heads)
    return {"naive": naive, "eager": eager, "paced": paced}


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    import mxnet as mx
    found = arms(args.micro)
    for forward_only in (True, False):
        times = {name: [] for name in found}
        for fn in found.values():  # warm
            fn(forward_only)
            mx.nd.waitall()
        for rep in range(args.repeats):
            for name in (list(found) if rep % 2 == 0 else list(found)[::-1]):
                start = time.perf_counter()
                for _ in range(3):
                    found[name](forward_only)
                    mx.nd.waitall()
                times[name].append(time.perf_counter() - start)
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"{'forward only' if forward_only else 'forward and backward'}, M={args.micro}, "
              f"MXNET_CPU_TEMP_COPY={os.environ.get('MXNET_CPU_TEMP_COPY', 'unset (4)')}: "
              f"naive / eager {med['naive'] / med['eager']:.2f}, "
              f"naive / paced {med['naive'] / med['paced']:.2f}", flush=True)


if __name__ == "__main__":
    main()
