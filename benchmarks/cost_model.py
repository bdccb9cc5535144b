"""How close the bench's cost model comes to the measured step time, on hosts made of network
namespaces (tests/netns.py: links shaped to RATE both ways with tc tbf). Needs root, ip, tc,
sshd.

    python benchmarks/cost_model.py [--rate 200mbit] [--mbytes 4] [--steps 6] [--repeats 3]

Runs `gluondist bench kvstore --launcher ssh -H a:1,b:1 --server-hosts s,t -n 2 --servers 1,2`
--repeats times: every row, each server count colocated and then on hosts of their own. One
run's step times move with the shared machine's load, so the model is calibrated on the median
of the first row's repeats, and each row's error and efficiency are taken against the median
of its own: target within 15% of the model, and an efficiency against the raw TCP bound (the
bench's probe) above 30%.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import netns  # noqa: E402

GLUONDIST = [sys.executable, "-m", "gluondist.cli"]

WITHIN = 0.15
EFFICIENCY = (0.3, 1.05)  # above 1: faster than raw TCP, which only a wrong bound explains


def bench_rows(cluster, mbytes, steps):
    """One bench over every layout: its JSON rows."""
    a, b, s, t = cluster.hosts
    out = subprocess.run(
        [*GLUONDIST, "bench", "kvstore", "--launcher", "ssh", "--ssh-config",
         cluster.ssh_config, "-H", f"{a}:1,{b}:1", "--server-hosts", f"{s},{t}", "-n", "2",
         "--servers", "1,2", "--mbytes", str(mbytes), "--keys", "1", "--steps", str(steps),
         "--json"], capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])["rows"]


def summary(runs):
    """Per row: (servers, layout, median step, model, error, efficiency). The model's
    prediction of a row is the first row's time times a ratio of bytes on the busiest links,
    the same in every run: it is scaled to the first row's median."""
    first = statistics.median(run[0]["step_s"] for run in runs)
    table = []
    for i, row in enumerate(runs[0]):
        step = statistics.median(run[i]["step_s"] for run in runs)
        model = first * row["predicted_step_s"] / runs[0][0]["step_s"]
        bounds = [run[i]["link_bound_s"] for run in runs if run[i]["link_bound_s"]]
        efficiency = statistics.median(bounds) / step if bounds else None
        table.append((row["servers"], row["layout"], step, model, model / step - 1, efficiency))
    return table


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--mbytes", type=float, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    runs = []
    with tempfile.TemporaryDirectory() as tmp, netns.Cluster(4, tmp, rate=args.rate) as cluster:
        for rep in range(args.repeats):
            runs.append(bench_rows(cluster, args.mbytes, args.steps))
            print(f"repeat {rep}: step s " + "  ".join(
                f"{r['servers']} {r['layout']} {r['step_s']:.4f}" for r in runs[-1]), flush=True)
    print(f"\nmedians of {args.repeats} repeats, the model calibrated on the first row's "
          f"(target: error within {WITHIN:.0%}, efficiency {EFFICIENCY[0]:.0%} to "
          f"{EFFICIENCY[1]:.0%})")
    print(f"{'servers':>7} {'layout':>9} {'step s':>8} {'model s':>8} {'error':>6} "
          f"{'link eff':>8}")
    missed = 0
    for servers, layout, step, model, error, efficiency in summary(runs):
        ok = abs(error) <= WITHIN and efficiency is not None and \
            EFFICIENCY[0] < efficiency <= EFFICIENCY[1]
        missed += not ok
        eff = "-" if efficiency is None else f"{efficiency:.0%}"
        print(f"{servers:>7} {layout:>9} {step:>8.4f} {model:>8.4f} {error:>+6.0%} {eff:>8}"
              f"{'' if ok else '  outside the target'}")
    print(f"{len(runs[0]) - missed} of {len(runs[0])} rows within the target")


if __name__ == "__main__":
    main()
