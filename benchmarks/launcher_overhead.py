"""`gluondist launch` against a raw DMLC_* spawn of the same hand-written dist_sync script.

Alternated in one run, 2 workers and 1 server on loopback, the same OMP_NUM_THREADS for both:
  * worker throughput (steps/s of rank 0 once the job runs): launcher / raw, target >= 1.0;
  * wall time of a trivial job (join and leave): launcher - raw, target within 0.3 s;
  * from a worker's death (sys.exit(3)) to the launcher's exit: target <= 2 s.

    python benchmarks/launcher_overhead.py [--repeats 5] [--steps 300] [--stall-timeout 60]

With --stall-timeout the launched jobs run with stall detection on (heartbeats from every step,
the launcher watching them); the raw spawn stays as it is.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
THREADS = {"OMP_NUM_THREADS": "1"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw_spawn(args, cwd, workers=2):
    """What people write by hand: scheduler, server, workers with DMLC_* set; wait for all."""
    base = {**os.environ, **THREADS, "DMLC_PS_ROOT_URI": "127.0.0.1",
            "DMLC_PS_ROOT_PORT": str(free_port()), "DMLC_NUM_WORKER": str(workers),
            "DMLC_NUM_SERVER": "1", "DMLC_NODE_HOST": "127.0.0.1"}
    procs = [subprocess.Popen([sys.executable, "-c", "import mxnet"],
                              env={**base, "DMLC_ROLE": role}, cwd=cwd)
             for role in ("scheduler", "server")]
    procs += [subprocess.Popen([sys.executable, WORKER, *args], cwd=cwd, text=True,
                               env={**base, "DMLC_ROLE": "worker"}, stdout=subprocess.PIPE)
              for _ in range(workers)]
    out = "".join(p.communicate()[0] for p in procs[2:])
    for p in procs:
        p.wait()
    return out


LAUNCH_FLAGS = []


def launcher(args, cwd, workers=2):
    proc = subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", "-n", str(workers),
                           "-s", "1", *LAUNCH_FLAGS, WORKER, *args], env={**os.environ, **THREADS}, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc.stdout, proc.returncode


def throughput(text):
    return float(re.search(r"THROUGHPUT ([\d.]+)", text).group(1))


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trivial-repeats", type=int, default=4,
                        help="trivial-job pairs per repeat: its timing is mostly import noise")
    parser.add_argument("--stall-timeout", type=float, default=None,
                        help="launch with stall detection on (seconds)")
    args = parser.parse_args()
    if args.stall_timeout is not None:
        LAUNCH_FLAGS.extend(["--stall-timeout", str(args.stall_timeout)])
    cwd = tempfile.mkdtemp()
    ratios, walls, deaths = [], [], []
    for rep in range(args.repeats):
        order = ("raw", "launch") if rep % 2 == 0 else ("launch", "raw")
        speed, wall = {}, {}
        for how in order:
            if how == "raw":
                speed[how] = throughput(raw_spawn(["train", str(args.steps)], cwd))
            else:
                speed[how] = throughput(launcher(["train", str(args.steps)], cwd)[0])
        for _ in range(args.trivial_repeats):
            for how in order:
                start = time.perf_counter()
                raw_spawn(["trivial"], cwd) if how == "raw" else launcher(["trivial"], cwd)
                wall.setdefault(how, []).append(time.perf_counter() - start)
            walls.append(wall["launch"][-1] - wall["raw"][-1])
        before = set(os.listdir(cwd))
        _, code = launcher(["die"], cwd)
        ended = time.time()
        died = [f for f in set(os.listdir(cwd)) - before if f.startswith("died.")]
        assert code == 3 and len(died) == 1, (code, died)
        with open(os.path.join(cwd, died[0])) as f:
            deaths.append(ended - float(f.read()))
        ratios.append(speed["launch"] / speed["raw"])
        print(f"repeat {rep}: throughput raw {speed['raw']:.1f} launch {speed['launch']:.1f} "
              f"steps/s (ratio {ratios[-1]:.3f}); trivial job raw "
              f"{statistics.median(wall['raw']):.2f}s launch "
              f"{statistics.median(wall['launch']):.2f}s; death to exit {deaths[-1]:.2f}s",
              flush=True)
    print(f"median throughput ratio launch/raw: {statistics.median(ratios):.3f} (target >= 1.0)")
    print(f"median trivial-job wall time over {len(walls)} pairs, launch - raw: "
          f"{statistics.median(walls):+.2f}s (target <= 0.3s)")
    print(f"median worker death to launcher exit: {statistics.median(deaths):.2f}s "
          f"(max {max(deaths):.2f}s; target <= 2s)")


if __name__ == "__main__":
    main()
