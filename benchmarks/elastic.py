"""How long an elastic job takes to change shape, on network-namespace hosts.

    python benchmarks/elastic.py [--repeats 2] [--link-timeout 18] [--every 10]
                                 [--samples 24000] [--json FILE]

(as root.) Three hosts (tests/netns.py, 1 Gbit/s links), a `fit` of a small net, 32 samples
per worker, 24,000 samples (250 batches an epoch with 3 workers, 375 with 2; an epoch of
2 workers takes about 40 s, well over the 6 s a discovered host waits before it counts), over
ssh with `-n 2:3`. Each worker appends ``time worker_count epoch batch`` to a file at the end of every
batch (a callback of the script below), so the times read off are those of real training
steps. Each of shrink and grow runs twice in every round, alternating: with checkpoints at
epoch ends only (``epoch``), and with ``checkpoint_every=--every`` as well (``step``):

- **shrink**: 3 workers; the third host's link is cut (its packets dropped, as an unplugged
  cable) in the second epoch, after a random number of its batches (the same in both arms of
  a round); measured: from the cut to the first batch of 2 workers, and the batches trained
  twice (the last batch the 3 workers ended, minus the first the 2 workers trained, plus 1);
- **grow**: 2 workers, listed by a --host-discovery script; the third host is added to its
  output in the second epoch, at the same random point; measured: from then to the first
  batch of 3 workers (an epoch checkpoint waits for the epoch's end, a step one for the next
  step checkpoint);
- **start** (the baseline, in the same run): from `gluondist launch` to the first batch of
  a fresh 3-worker job, which a restart pays again.
"""
import argparse
import json
import os
import random
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
            f.write(f"{time.time()} {run.num_workers} {run.epoch} {batch}\\n")

rs = np.random.RandomState(0)
X = rs.rand(int(sys.argv[5]), 32).astype(np.float32)
y = (X[:, 0] > 0.5).astype(np.float32)
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(64, activation="relu"), mx.gluon.nn.Dense(2))
gluondist.fit(net, (X, y), epochs=int(sys.argv[3]), batch_size=32, seed=1,
              checkpoint_dir=sys.argv[2], callbacks=[Stamp()], progress=False,
              checkpoint_every=int(sys.argv[4]) or None)
'''


def launch(cluster, work, args, samples, every=0, epochs=40):
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    log = os.path.join(work, "steps")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gluondist.cli", "launch", "--launcher", "ssh", "--ssh-config",
         cluster.ssh_config, "-s", "1", *args, script, log, os.path.join(work, "ckpt"),
         str(epochs), str(every), str(samples)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, cwd=work)
    return proc, log


def steps(log):
    """Every batch a worker ended: ``(time, workers, epoch, batch)``."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [(float(t), int(n), int(e), int(b)) for t, n, e, b in
                (line.split() for line in f if line.strip())]


def first_step(log, workers, after, timeout=300):
    """The first batch with ``workers`` workers that ended after ``after``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        hits = [s for s in steps(log) if s[1] == workers and s[0] > after]
        if hits:
            return min(hits)
        time.sleep(0.1)
    raise SystemExit(f"no batch of {workers} workers within {timeout}s")


def wait_for(log, workers, epoch, batch, timeout=300):
    """Until a batch at or past ``(epoch, batch)`` with ``workers`` workers ended."""
    deadline = time.time() + timeout
    while not any(s[1] == workers and (s[2], s[3]) >= (epoch, batch) for s in steps(log)):
        if time.time() > deadline:
            raise SystemExit(f"no batch {batch} of epoch {epoch + 1} within {timeout}s")
        time.sleep(0.05)


def end(proc):
    """SIGTERM: the launcher stops every process of the job on every host, then exits."""
    proc.terminate()
    proc.wait(timeout=120)


def shrink(cluster, work, link, every, at, samples):
    hosts = ",".join(f"{h}:1" for h in cluster.hosts)
    proc, log = launch(cluster, work, ["-H", hosts, "-n", "2:3", "--max-restarts", "1",
                                       "--link-timeout", str(link)], samples, every)
    try:
        wait_for(log, 3, 1, at)
        cluster.cut(cluster.hosts[2])
        cut = time.time()
        after = first_step(log, 2, cut)
        last = max((s for s in steps(log) if s[1] == 3), key=lambda s: (s[2], s[3]))
        per_epoch = -(-samples // 96)  # batches of 3 workers x 32 (the global batch is kept)
        retrained = (last[2] - after[2]) * per_epoch + last[3] - after[3] + 1
        return after[0] - cut, retrained
    finally:
        end(proc)
        cluster.heal(cluster.hosts[2])


def grow(cluster, work, link, every, at, samples):
    listing = os.path.join(work, "listing")
    with open(listing, "w") as f:
        f.write("".join(f"{h}:1\n" for h in cluster.hosts[:2]))
    script = os.path.join(work, "discover.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {listing}\n")
    os.chmod(script, 0o755)
    proc, log = launch(cluster, work, ["--host-discovery", script, "-n", "2:3",
                                       "--link-timeout", str(link)], samples, every)
    try:
        wait_for(log, 2, 1, at)
        with open(listing, "w") as f:
            f.write("".join(f"{h}:1\n" for h in cluster.hosts))
        listed = time.time()
        return first_step(log, 3, listed)[0] - listed, None
    finally:
        end(proc)


def start(cluster, work, link, every, at, samples):
    hosts = ",".join(f"{h}:1" for h in cluster.hosts)
    began = time.time()
    proc, log = launch(cluster, work, ["-H", hosts, "-n", "3", "--link-timeout", str(link)],
                       samples)
    try:
        return first_step(log, 3, began)[0] - began, None
    finally:
        end(proc)


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--link-timeout", type=float, default=18.0)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--samples", type=int, default=24000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    netns.require()
    arms = [("start", start, 0), ("shrink epoch", shrink, 0), ("shrink step", shrink, args.every),
            ("grow epoch", grow, 0), ("grow step", grow, args.every)]
    rows = {name: [] for name, _, _ in arms}
    retrained = {name: [] for name, _, _ in arms if name.startswith("shrink")}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp, netns.Cluster(3, os.path.join(tmp, "net")) as c:
        for i in range(args.repeats):  # alternating, so a noisy minute spreads over all arms
            at = rng.randrange(5, args.samples // 96 - 5)  # the batch of epoch 2 it comes after
            for name, measure, every in (arms if i % 2 == 0 else arms[::-1]):
                work = tempfile.mkdtemp(dir=tmp)
                seconds, again = measure(c, work, args.link_timeout, every, at, args.samples)
                rows[name].append(round(seconds, 1))
                if again is not None:
                    retrained[name].append(again)
                print(f"{name} (after batch {at} of epoch 2): {seconds:.1f}s" +
                      (f", {again} batches trained twice" if again is not None else ""),
                      flush=True)
    result = {"command": "python " + " ".join(sys.argv), "link_timeout": args.link_timeout,
              "every": args.every, "samples": args.samples,
              "seconds": rows, "retrained_batches": retrained}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
