"""Are the cores or the links the limit? A colocated bench of W workers and W servers on W
namespace hosts (as root), with the machine's CPU sampled while it runs.

    python benchmarks/cpu_share.py [--workers 3] [--rate 200mbit] [--steps 40]

Runs `gluondist bench kvstore --launcher ssh -n W --servers W --mbytes 8 --keys 1 --steps
STEPS` (each host a worker and a server), samples /proc/stat every 0.5 s, and reads each of the
job's processes' CPU time (by its DMLC_ROLE) until it ends. Prints the bench's row, how busy
the machine's cores were over the middle half of the run, and each role's CPU seconds per
second of the run. Every namespace host shares this machine's cores: where they are nearly all
busy, the step waits for CPU as well as for the links.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import netns  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def busy_and_total():
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    idle = cpu[3] + cpu[4]
    return sum(cpu) - idle, sum(cpu)


def roles():
    """pid -> (DMLC_ROLE, CPU seconds) of every live process that has a role."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        role = env.get(b"DMLC_ROLE")
        if role:
            found[int(entry)] = (role.decode(), (int(fields[11]) + int(fields[12])) / TICKS)
    return found


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    with tempfile.TemporaryDirectory() as tmp, \
            netns.Cluster(args.workers, tmp, rate=args.rate) as cluster:
        job = subprocess.Popen(
            [sys.executable, "-m", "gluondist.cli", "bench", "kvstore", "--launcher", "ssh",
             "--ssh-config", cluster.ssh_config, "-H", ",".join(f"{h}:1" for h in cluster.hosts),
             "-n", str(args.workers), "--servers", str(args.workers), "--mbytes", "8",
             "--keys", "1", "--steps", str(args.steps), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples, cpu, start = [busy_and_total()], {}, time.monotonic()
        try:
            while job.poll() is None:
                time.sleep(0.5)
                samples.append(busy_and_total())
                cpu.update(roles())
            out, err = job.communicate(timeout=60)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    elapsed = time.monotonic() - start
    if job.returncode != 0:
        raise SystemExit(err)
    row = json.loads(out.strip().splitlines()[-1])["rows"][0]
    shares = [(b1 - b0) / (t1 - t0) for (b0, t0), (b1, t1) in zip(samples, samples[1:])
              if t1 > t0]
    middle = shares[len(shares) // 4: 3 * len(shares) // 4]
    print(f"W={args.workers}, {args.workers} colocated servers: step {row['step_s']:.3f} s, "
          f"link efficiency {row['link_efficiency']:.3f} ({1 / row['link_efficiency']:.2f} "
          f"times the link bound)")
    print(f"cores busy over the middle half of the run ({len(middle) / 2:.0f} s): median "
          f"{statistics.median(middle):.0%}, lowest {min(middle):.0%}")
    for role in ("worker", "server", "scheduler"):
        seconds = sum(s for r, s in cpu.values() if r == role)
        print(f"{role}s: {seconds:.1f} CPU-s in {elapsed:.1f} s of run, "
              f"{seconds / elapsed:.2f} cores")


if __name__ == "__main__":
    main()
