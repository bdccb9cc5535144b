"""How long an elastic job takes to change shape, on network-namespace hosts.

    python benchmarks/elastic.py [--repeats 2] [--link-timeout 18] [--json FILE]

(as root.) Three hosts (tests/netns.py, 1 Gbit/s links), a `fit` of a small net, 32 samples
per worker, over ssh with `-n 2:3`. Each worker appends ``time worker_count`` to a file at the
end of every batch (a callback of the script below), so the times read off are those of real
training steps:

- **shrink**: 3 workers; the third host's link is cut (its packets dropped, as an unplugged
  cable) after the first epoch; measured: from the cut to the first batch of 2 workers;
- **grow**: 2 workers, listed by a --host-discovery script; the third host is added to its
  output after the first epoch; measured: from then to the first batch of 3 workers;
- **start** (the baseline, in the same run): from `gluondist launch` to the first batch of
  a fresh 3-worker job, which a restart pays again.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import netns  # noqa: E402

SCRIPT = '''
import os, sys, time
import numpy as np, mxnet as mx, gluondist
log = sys.argv[1]

class Stamp(gluondist.Callback):
    def on_batch_end(self, run, batch, logs):
        time.sleep(0.1)
        with open(log, "a") as f:
            f.write(f"{time.time()} {run.num_workers}\\n")

rs = np.random.RandomState(0)
X = rs.rand(2000, 32).astype(np.float32)
y = (X[:, 0] > 0.5).astype(np.float32)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(64, activation="relu"), mx.gluon.nn.Dense(2))
gluondist.fit(net, (X, y), epochs=int(sys.argv[3]), batch_size=32, seed=1,
              checkpoint_dir=sys.argv[2], callbacks=[Stamp()], progress=False)
'''


def launch(cluster, work, args, epochs=40):
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    log = os.path.join(work, "steps")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gluondist.cli", "launch", "--launcher", "ssh", "--ssh-config",
         cluster.ssh_config, "-s", "1", *args, script, log, os.path.join(work, "ckpt"),
         str(epochs)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=work)
    return proc, log


def steps(log):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [(float(t), int(n)) for t, n in (l.split() for l in f if l.strip())]


def first_step(log, workers, after, timeout=300):
    """When the first batch with ``workers`` workers ended, after ``after``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        hits = [t for t, n in steps(log) if n == workers and t > after]
        if hits:
            return min(hits)
        time.sleep(0.1)
    raise SystemExit(f"no batch of {workers} workers within {timeout}s")


def epoch_done(work, count=1, timeout=300):
    deadline = time.time() + timeout
    while len([d for d in os.listdir(os.path.join(work, "ckpt"))
               if d.startswith("ckpt-")] if os.path.isdir(os.path.join(work, "ckpt")) else []) \
            < count:
        if time.time() > deadline:
            raise SystemExit("no checkpoint")
        time.sleep(0.1)


def end(proc):
    """SIGTERM: the launcher stops every process of the job on every host, then exits."""
    proc.terminate()
    proc.wait(timeout=120)


def shrink(cluster, work, link):
    hosts = ",".join(f"{h}:1" for h in cluster.hosts)
    proc, log = launch(cluster, work, ["-H", hosts, "-n", "2:3", "--max-restarts", "1",
                                       "--link-timeout", str(link)])
    try:
        start = time.time()
        first_step(log, 3, start)
        epoch_done(work)
        cluster.cut(cluster.hosts[2])
        cut = time.time()
        return first_step(log, 2, cut) - cut
    finally:
        end(proc)
        cluster.heal(cluster.hosts[2])


def grow(cluster, work, link):
    listing = os.path.join(work, "listing")
    with open(listing, "w") as f:
        f.write("".join(f"{h}:1\n" for h in cluster.hosts[:2]))
    script = os.path.join(work, "discover.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {listing}\n")
    os.chmod(script, 0o755)
    proc, log = launch(cluster, work, ["--host-discovery", script, "-n", "2:3",
                                       "--link-timeout", str(link)])
    try:
        first_step(log, 2, time.time() - 1)
        epoch_done(work)
        with open(listing, "w") as f:
            f.write("".join(f"{h}:1\n" for h in cluster.hosts))
        listed = time.time()
        return first_step(log, 3, listed) - listed
    finally:
        end(proc)


def start(cluster, work, link):
    hosts = ",".join(f"{h}:1" for h in cluster.hosts)
    began = time.time()
    proc, log = launch(cluster, work, ["-H", hosts, "-n", "3", "--link-timeout", str(link)])
    try:
        return first_step(log, 3, began) - began
    finally:
        end(proc)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--link-timeout", type=float, default=18.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    netns.require()
    rows = {"start": [], "shrink": [], "grow": []}
    with tempfile.TemporaryDirectory() as tmp, netns.Cluster(3, os.path.join(tmp, "net")) as c:
        for i in range(args.repeats):  # alternating, so a noisy minute spreads over all three
            for name, measure in (("start", start), ("shrink", shrink), ("grow", grow)):
                work = tempfile.mkdtemp(dir=tmp)
                seconds = measure(c, work, args.link_timeout)
                rows[name].append(round(seconds, 1))
                print(f"{name}: {seconds:.1f}s", flush=True)
    result = {"link_timeout": args.link_timeout, "seconds": rows}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
