"""What a chunk size costs where no link limits the step: ``gluondist bench kvstore`` on this
machine (loopback), one chunk size against another, alternating, repeated.

    python benchmarks/chunk_size.py [--sizes 65536 524288] [--repeats 3] [--json FILE]

Two cases, each with 2 workers and 1 and 2 servers: a small model (1 MB in 8 arrays, the
latency of a step) and a big one (64 MB in 8 arrays, the throughput). The figure per case and
server count is the median over the repeats of (the first size's step time ÷ the second's),
above 1 when the first is slower."""
import argparse
import json
import statistics
import subprocess
import sys

CASES = (("small", 1.0, 20), ("big", 64.0, 10))  # (name, megabytes, steps), 8 arrays each


def bench(mbytes: float, steps: int, chunk: int) -> dict:
    """{servers: step seconds} of one ``gluondist bench kvstore --json`` run."""
    argv = [sys.executable, "-m", "gluondist.cli", "bench", "kvstore", "-n", "2", "--servers",
            "1,2", "--mbytes", str(mbytes), "--keys", "8", "--steps", str(steps),
            "--chunk-bytes", str(chunk), "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    rows = json.loads(out.strip().splitlines()[-1])["rows"]
    return {row["servers"]: row["step_s"] for row in rows}


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--sizes", type=int, nargs=2, default=[1 << 16, 1 << 19],
                        metavar="BYTES")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    first, second = sizes = tuple(args.sizes)
    result = {"command": "python " + " ".join(sys.argv), "sizes": sizes, "cases": []}
    for name, mbytes, steps in CASES:
        times = {size: [] for size in sizes}
        for rep in range(args.repeats):
            for size in (sizes if rep % 2 == 0 else sizes[::-1]):
                times[size].append(bench(mbytes, steps, size))
        for servers in times[first][0]:
            ratios = [a[servers] / b[servers] for a, b in zip(times[first], times[second])]
            case = {"case": name, "mbytes": mbytes, "servers": servers,
                    "first_s": [t[servers] for t in times[first]],
                    "second_s": [t[servers] for t in times[second]],
                    "ratio": statistics.median(ratios)}
            result["cases"].append(case)
            print(f"{name} ({mbytes:g} MB), -s {servers}: {first} bytes take "
                  f"{case['ratio']:.3f} of {second}'s step time", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
