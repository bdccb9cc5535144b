"""Time two arms of a benchmark alternately (ABAB, then BABA) in one run: the shared machine's
noise falls on both alike. Prints each pair and the median ratio; with ``save``, also writes
them as JSON for benchmarks/plots.py."""
import json
import statistics
import time


def alternate(arms, repeats: int, check=None, target: float = 1.05, save=None) -> float:
    """``arms``: {"hand": fn, "fit": fn}, each ``fn(rep)`` returning its outputs; ``check(outputs
    by name)`` asserts the arms really trained alike. Returns the median fit/hand ratio;
    ``save`` (a path) gets ``{"pairs": [{"hand": s, "fit": s, "ratio": r}, ...], "median"}``."""
    order = list(arms.items())
    ratios, pairs = [], []
    for rep in range(repeats):
        timings, results = {}, {}
        for name, fn in (order if rep % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            results[name] = fn(rep)
            timings[name] = time.perf_counter() - start
        if check is not None:
            check(results)
        ratios.append(timings["fit"] / timings["hand"])
        pairs.append({**timings, "ratio": ratios[-1]})
        print(f"repeat {rep}: hand {timings['hand']:.3f}s  fit {timings['fit']:.3f}s  "
              f"ratio {ratios[-1]:.3f}", flush=True)
    median = statistics.median(ratios)
    print(f"median fit/hand ratio over {repeats} repeats: {median:.3f} (target <= {target})")
    if save:
        with open(save, "w") as f:
            json.dump({"pairs": pairs, "median": median, "target": target}, f, indent=1)
    return median
