"""The parameter server across real links: hosts made of network namespaces on one bridge
(tests/netns.py), each link shaped to RATE both ways with tc tbf. Needs root, ip, tc, sshd.

    python benchmarks/network.py [--rate 200mbit] [--mbytes 8] [--repeats 3] [--only PART]
        [--workers 2] [--json FILE] [--samples N]  (--json: the bench's JSON line, for
        benchmarks/plots.py)

1. Raw TCP between two hosts (benchmarks/tcp_pair.py, the hand-written baseline): one way,
   and both ways at once (the links are full duplex).
2. `gluondist bench kvstore` over ssh, 2 workers (--workers W), 1 to W servers, on the
   workers' hosts and on hosts of their own (--server-hosts), each row chunked as fit sends
   it and with every array whole (--unchunked): step time, the model's prediction and error,
   and the efficiency against the raw TCP bound (the bench's own probe); --repeats benches,
   each row's median efficiency.
3. fit's samples/s across 2 hosts for a model dominated by one 8 MiB layer
   (benchmarks/big_layer.py), chunked (the default) against GLUONDIST_CHUNK_BYTES=0,
   alternated in one run, --repeats pairs: the median ratio.
4. (--only compression) The bench with --compression none,fp16,2bit, 2 workers, 1 server on
   the workers' hosts; then fit's samples/s for that model with compression=None, 'fp16' and
   '2bit', alternated in one run, --repeats rounds: the median ratio of each to None's
   (--samples in the fits' data set, 2,048 by default: 16 steps an epoch).
5. (--only chunks) The bench with --chunk-bytes 524288,65536, W workers (--workers) and W
   servers, one on each worker's host, --repeats times: each run's advice and the 64 KiB
   rows' steps per second against 512 KiB's; the JSON written has the command, the ratios
   and every run's JSON line.
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


def raw_tcp(cluster, a, b, mbytes, both=False):
    """MB/s received at b from a (and at a from b at the same time, with ``both``)."""
    pairs = [(a, b)] + ([(b, a)] if both else [])
    receivers = []
    for i, (sender, receiver) in enumerate(pairs):
        r = subprocess.Popen(["ip", "netns", "exec", cluster.ns[receiver], sys.executable,
                              os.path.join(HERE, "tcp_pair.py"), "recv", receiver,
                              str(5201 + i)], stdout=subprocess.PIPE, text=True)
        assert r.stdout.readline().strip() == "listening"
        receivers.append(r)
    senders = [subprocess.Popen(["ip", "netns", "exec", cluster.ns[s], sys.executable,
                                 os.path.join(HERE, "tcp_pair.py"), "send", r, str(5201 + i),
                                 str(mbytes)]) for i, (s, r) in enumerate(pairs)]
    for p in senders:
        p.wait(timeout=120)
    return [float(r.communicate(timeout=60)[0]) / 2 ** 20 for r in receivers]


def bench(cluster, hosts, mbytes, workers=2):
    """W workers on the first W hosts, 1 to W servers on them and on the next W."""
    mine, theirs = hosts[:workers], hosts[workers:2 * workers]
    out = subprocess.run(
        [*GLUONDIST, "bench", "kvstore", "--launcher", "ssh", "--ssh-config",
         cluster.ssh_config, "-H", ",".join(f"{h}:1" for h in mine), "--server-hosts",
         ",".join(theirs), "-n", str(workers), "--servers",
         ",".join(str(s) for s in range(1, workers + 1)), "--mbytes", str(mbytes), "--keys",
         "1", "--steps", "8", "--unchunked", "--json"],
        capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return out.stdout


def benches(cluster, hosts, args):
    """Part 2, --repeats times: each row's link efficiency, and its median over the runs; the
    JSON written is the run whose 1-server colocated row had the median efficiency."""
    runs = []
    for rep in range(args.repeats):
        table = bench(cluster, hosts, args.mbytes, args.workers)
        print(table, flush=True)
        runs.append(json.loads(table.strip().splitlines()[-1]))
    efficiency = {}
    for run in runs:
        for row in run["rows"]:
            efficiency.setdefault((row["servers"], row["layout"]), []).append(
                row["link_efficiency"])
    for (servers, layout), figures in efficiency.items():
        print(f"{servers} server(s) {layout}: link efficiency "
              f"{', '.join(f'{e:.3f}' for e in figures)}; median {statistics.median(figures):.3f}",
              flush=True)
    runs.sort(key=lambda run: run["rows"][0]["link_efficiency"])  # every run's rows in one order
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(runs[len(runs) // 2]) + "\n")


def fit_samples(cluster, hosts, chunk, workdir, compression="none", samples=512):
    a, b = hosts[:2]
    env = [] if chunk is None else ["--env", f"GLUONDIST_CHUNK_BYTES={chunk}"]
    out = subprocess.run(
        [*GLUONDIST, "launch", "--launcher", "ssh", "--ssh-config", cluster.ssh_config,
         "-H", f"{a}:1,{b}:1", "-n", "2", "-s", "1", *env, os.path.join(HERE, "big_layer.py"),
         "3", compression, str(samples)], capture_output=True, text=True, timeout=1200,
        cwd=workdir)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return float(next(line.split()[-1] for line in out.stdout.splitlines()
                      if "big-layer-samples-per-s" in line))


def compression(cluster, hosts, args, workdir):
    a, b = hosts[:2]
    out = subprocess.run(
        [*GLUONDIST, "bench", "kvstore", "--launcher", "ssh", "--ssh-config",
         cluster.ssh_config, "-H", f"{a}:1,{b}:1", "-n", "2", "--servers", "1", "--mbytes",
         str(args.mbytes), "--keys", "1", "--steps", "8", "--compression", "none,fp16,2bit",
         "--json"], capture_output=True, text=True, timeout=1200)
    print(out.stdout if out.returncode == 0 else out.stderr, flush=True)
    if args.json and out.returncode == 0:
        with open(args.json, "w") as f:
            f.write(out.stdout.strip().splitlines()[-1] + "\n")
    kinds = ["none", "fp16", "2bit"]
    ratios = {k: [] for k in kinds[1:]}
    for rep in range(args.repeats):
        order = kinds if rep % 2 == 0 else kinds[::-1]
        figures = {k: fit_samples(cluster, hosts, None, workdir, k, args.samples)
                   for k in order}
        for k in kinds[1:]:
            ratios[k].append(figures[k] / figures["none"])
        print(f"round {rep}: fit samples/s " + ", ".join(f"{k} {figures[k]:.1f}" for k in kinds),
              flush=True)
    for k in kinds[1:]:
        print(f"median {k}/none samples/s over {args.repeats} rounds: "
              f"{statistics.median(ratios[k]):.2f}", flush=True)


def chunk_sizes(cluster, hosts, args):
    workers = hosts[:args.workers]
    runs = []
    for rep in range(args.repeats):
        out = subprocess.run(
            [*GLUONDIST, "bench", "kvstore", "--launcher", "ssh", "--ssh-config",
             cluster.ssh_config, "-H", ",".join(f"{h}:1" for h in workers), "-n",
             str(args.workers), "--servers", str(args.workers), "--mbytes", str(args.mbytes),
             "--keys", "1", "--steps", "8", "--chunk-bytes", "524288,65536", "--json"],
            capture_output=True, text=True, timeout=1200)
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        print(out.stdout, flush=True)
        run = json.loads(out.stdout.strip().splitlines()[-1])
        big, small = (r["step_s"] for r in run["rows"])
        runs.append((big / small, run))
    ratios = [ratio for ratio, _ in runs]
    print(f"64 KiB against 512 KiB, steps per second: "
          f"{', '.join(f'{ratio:.2f}' for ratio in ratios)}; median "
          f"{statistics.median(ratios):.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "python " + " ".join(sys.argv), "ratios_64k_over_512k": ratios,
                       "runs": [run for _, run in runs]}, f, indent=1)
            f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--mbytes", type=float, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2,
                        help="(bench) workers, each on a host of its own; 1 to W servers")
    parser.add_argument("--only", choices=("tcp", "bench", "fit", "compression", "chunks"),
                        help="run one part (compression and chunks: only when named)")
    parser.add_argument("--json", metavar="FILE", help="write the bench's JSON line to FILE")
    parser.add_argument("--samples", type=int, default=2048,
                        help="(compression) the fits' data set: 16 steps an epoch")
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    size = max(4, 2 * args.workers)
    with tempfile.TemporaryDirectory() as tmp, netns.Cluster(size, tmp, rate=args.rate) as cluster:
        hosts = cluster.hosts
        if args.only in (None, "tcp"):
            one = raw_tcp(cluster, hosts[0], hosts[1], 4 * args.mbytes)[0]
            both = raw_tcp(cluster, hosts[0], hosts[1], 4 * args.mbytes, both=True)
            print(f"raw TCP at {args.rate}: {one:.1f} MB/s one way; both ways at once "
                  f"{both[0]:.1f} and {both[1]:.1f} MB/s", flush=True)
        if args.only in (None, "bench"):
            benches(cluster, hosts, args)
        if args.only == "compression":
            return compression(cluster, hosts, args, tmp)
        if args.only == "chunks":
            return chunk_sizes(cluster, hosts, args)
        if args.only not in (None, "fit"):
            return
        ratios = []
        for rep in range(args.repeats):
            order = [None, "0"] if rep % 2 == 0 else ["0", None]
            figures = {c: fit_samples(cluster, hosts, c, tmp) for c in order}
            ratios.append(figures[None] / figures["0"])
            print(f"repeat {rep}: fit samples/s chunked {figures[None]:.1f}, whole "
                  f"{figures['0']:.1f}, ratio {ratios[-1]:.2f}", flush=True)
        print(f"median chunked/whole samples/s over {args.repeats} pairs: "
              f"{statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
