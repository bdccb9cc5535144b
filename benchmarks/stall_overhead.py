"""What stall detection costs: worker throughput alternated in one run between a raw DMLC_*
spawn, `gluondist launch` and `gluondist launch --stall-timeout 60` (the same hand-written
dist_sync script, which beats every step as fit does), and the launcher's own CPU time over a
job with and without it.

    python benchmarks/stall_overhead.py [--steps 3000] [--rounds 6]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launcher_overhead as bench  # noqa: E402

# The launcher run in this wrapper, which reports its own CPU (every thread, no children).
CPU = ("import atexit, resource, sys\n"
       "def report():\n"
       "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
       "    sys.stderr.write('LAUNCHER_CPU %.3f\\n' % (r.ru_utime + r.ru_stime))\n"
       "atexit.register(report)\n"
       "from gluondist.cli import main\n"
       "main(['launch', *sys.argv[1:]])\n")


def launch(flags, steps, cwd):
    proc = subprocess.run([sys.executable, "-c", CPU, "-n", "2", "-s", "1", *flags,
                           bench.WORKER, "train", str(steps)], cwd=cwd, text=True,
                          env={**os.environ, **bench.THREADS}, capture_output=True)
    cpu = float(proc.stderr.rsplit("LAUNCHER_CPU ", 1)[1].split()[0])
    return bench.throughput(proc.stdout), cpu


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    cwd = tempfile.mkdtemp()
    speed = {"raw": [], "launch": [], "stall": []}
    cpu = {"launch": [], "stall": []}
    flags = {"launch": [], "stall": ["--stall-timeout", "60"]}
    for r in range(args.rounds):
        order = ["raw", "launch", "stall"]
        for how in order[r % 3:] + order[:r % 3]:
            if how == "raw":
                speed[how].append(bench.throughput(bench.raw_spawn(["train", str(args.steps)],
                                                                   cwd)))
            else:
                steps_per_s, seconds = launch(flags[how], args.steps, cwd)
                speed[how].append(steps_per_s)
                cpu[how].append(seconds)
        print(f"round {r}: steps/s raw {speed['raw'][-1]:.1f} launch {speed['launch'][-1]:.1f} "
              f"stall {speed['stall'][-1]:.1f}; launcher CPU {cpu['launch'][-1]:.2f}s / "
              f"{cpu['stall'][-1]:.2f}s", flush=True)
    med = {k: statistics.median(v) for k, v in speed.items()}
    print(f"median steps/s: raw {med['raw']:.1f} launch {med['launch']:.1f} "
          f"launch --stall-timeout 60 {med['stall']:.1f}; launch/raw "
          f"{med['launch'] / med['raw']:.3f}, stall/raw {med['stall'] / med['raw']:.3f}, "
          f"stall/launch {med['stall'] / med['launch']:.3f}")
    print(f"median launcher CPU per job: {statistics.median(cpu['launch']):.2f}s without, "
          f"{statistics.median(cpu['stall']):.2f}s with stall detection")


if __name__ == "__main__":
    main()
