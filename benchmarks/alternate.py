"""Time two arms of a benchmark alternately (ABAB, then BABA) in one run: the shared machine's
noise falls on both alike. Prints each pair and the median ratio."""
import statistics
import time


def alternate(arms, repeats: int, check=None, target: float = 1.05) -> float:
    """``arms``: {"hand": fn, "fit": fn}, each ``fn(rep)`` returning its outputs; ``check(outputs
    by name)`` asserts the arms really trained alike. Returns the median fit/hand ratio."""
    order = list(arms.items())
    ratios = []
    for rep in range(repeats):
        timings, results = {}, {}
        for name, fn in (order if rep % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            results[name] = fn(rep)
            timings[name] = time.perf_counter() - start
        if check is not None:
            check(results)
        ratios.append(timings["fit"] / timings["hand"])
        print(f"repeat {rep}: hand {timings['hand']:.3f}s  fit {timings['fit']:.3f}s  "
              f"ratio {ratios[-1]:.3f}", flush=True)
    median = statistics.median(ratios)
    print(f"median fit/hand ratio over {repeats} repeats: {median:.3f} (target <= {target})")
    return median
