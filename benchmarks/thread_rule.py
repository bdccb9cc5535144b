"""How many OpenMP threads should each worker get? `gluondist launch --threads T` for each T,
alternated, on a model large enough for its matrix products to use the threads.

    python benchmarks/thread_rule.py [--workers 2] [--threads 1 2] [--hidden 1024] [--batch 256]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    speeds = {t: [] for t in args.threads}
    for rep in range(args.repeats):
        order = args.threads if rep % 2 == 0 else args.threads[::-1]
        for t in order:
            out = subprocess.run(
                [sys.executable, "-m", "gluondist.cli", "launch", "-n", str(args.workers), "-s",
                 "1", "--threads", str(t), os.path.join(HERE, "dist_worker.py"), "train",
                 str(args.steps), str(args.hidden), str(args.batch)],
                env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
            speeds[t].append(float(re.search(r"THROUGHPUT ([\d.]+)", out.stdout).group(1)))
        print(f"repeat {rep}: " + "  ".join(f"{t} thread(s): {speeds[t][-1]:.1f} steps/s"
                                            for t in args.threads), flush=True)
    base = statistics.median(speeds[args.threads[0]])
    for t in args.threads:
        print(f"--threads {t}: median {statistics.median(speeds[t]):.1f} steps/s "
              f"({statistics.median(speeds[t]) / base:.2f}x of --threads {args.threads[0]})")
    print(f"cores: {os.cpu_count()}, workers: {args.workers}")


if __name__ == "__main__":
    main()
