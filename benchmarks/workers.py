"""Throughput against the number of workers on link-bound hosts, beside the cost model.

    python benchmarks/workers.py [--rate 200mbit] [--mbytes 8] [--most 4]
                                 [--chunk-bytes N] [--env K=V ...] [--json FILE]

(as root; `benchmarks/plots.py` draws workers.png from the --json file.) A cluster of
network-namespace hosts (tests/netns.py: each host its own network stack, sshd and one link
shaped to RATE both ways) of --most worker hosts and one more. For W = 1 .. --most workers,
each on a host of its own, one `gluondist bench kvstore -n W --servers W` over ssh, which runs
two jobs: the W servers on the workers' hosts, one each (colocated), then all W on the extra
host (dedicated, --server-hosts). The throughput is the gradient megabytes the W workers
synchronise per second: W x MBYTES / step time. ``--chunk-bytes`` is the bench's (default
gluondist.kvstore.CHUNK_BYTES).

The cost model (gluondist.bench.model) counts each job's bytes on every link. It is calibrated
once for the whole sweep, by the one-worker dedicated job (its bytes cross one link each way),
and predicts every other job from its bytes alone. A colocated job of one worker crosses no
link, so the model predicts nothing for it.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)  # peers.py, also when a test loads this file by its path
import netns  # noqa: E402
from gluondist.bench.kvstore import key_sizes, sent_sizes  # noqa: E402
from gluondist.bench.model import Layout, calibrate, link_bytes  # noqa: E402
from gluondist.envvars import GLUONDIST_CHUNK_BYTES  # noqa: E402
from gluondist.kv.chunks import CHUNK_BYTES, chunks_in_flight_from_env  # noqa: E402
from gluondist.launcher.errors import LaunchError  # noqa: E402
from gluondist.launcher.options import check_env, env_pairs  # noqa: E402
from peers import writable_file  # noqa: E402

GLUONDIST = [sys.executable, "-m", "gluondist.cli"]
STEPS = 8


def bench(cluster, workers, mbytes, chunk_bytes, env=()):
    """The bench's JSON object for ``workers`` workers: its colocated row, then its dedicated
    (``env``: the bench's --env settings, K=V each)."""
    hosts, extra = cluster.hosts[:workers], cluster.hosts[-1]
    out = subprocess.run(
        [*GLUONDIST, "bench", "kvstore", "--launcher", "ssh", "--ssh-config",
         cluster.ssh_config, "-H", ",".join(f"{h}:1" for h in hosts), "--server-hosts",
         f"{extra}:{workers}", "-n", str(workers), "--servers", str(workers), "--mbytes",
         str(mbytes), "--keys", "1", "--steps", str(STEPS), "--chunk-bytes", str(chunk_bytes),
         "--json", *(a for kv in env for a in ("--env", kv))],
        capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    print(out.stdout, flush=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def layout(workers: int, kind: str) -> Layout:
    """Where the bench put them (host names stand for the cluster's: only who shares a link
    counts): one worker per host, the servers one per worker host or all on one more."""
    hosts = tuple(f"h{i}" for i in range(workers))
    return Layout(hosts, hosts if kind == "colocated" else ("extra",) * workers)


def sweep_rows(measured, mbytes: float, chunk_bytes: int = CHUNK_BYTES):
    """``measured``: (workers, layout, step_s, link_efficiency) per job. Each as a row with
    its throughput and the model's, the model calibrated by the one-worker dedicated job."""
    sent = sent_sizes(key_sizes(mbytes, 1), chunk_bytes)
    links = {(w, kind): link_bytes(layout(w, kind), sent) for w, kind, _, _ in measured}
    step = {(w, kind): s for w, kind, s, _ in measured}
    rate = calibrate(links[1, "dedicated"], step[1, "dedicated"])
    rows = []
    for w, kind, step_s, efficiency in measured:
        busiest = links[w, kind].busiest()
        predicted = busiest / rate if busiest > 0 else None  # None: no byte crosses a link
        rows.append({"workers": w, "layout": kind, "servers": w, "step_s": step_s,
                     "mb_per_s": w * mbytes / step_s, "predicted_step_s": predicted,
                     "predicted_mb_per_s": None if predicted is None else w * mbytes / predicted,
                     "link_efficiency": efficiency})
    return rows


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--mbytes", type=float, default=8)
    parser.add_argument("--most", type=int, default=4, help="the largest worker count")
    parser.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)
    parser.add_argument("--env", action="append", default=[], metavar="K=V",
                        help="the bench's --env, for every job (such as "
                             "GLUONDIST_CHUNKS_IN_FLIGHT=1)")
    parser.add_argument("--json", metavar="FILE", help="write the sweep's rows to FILE")
    args = parser.parse_args()
    try:
        netns.rate_bits(args.rate)
        env = env_pairs(args.env)
        check_env({**env, GLUONDIST_CHUNK_BYTES: str(args.chunk_bytes)})
    except (LaunchError, ValueError) as exc:
        parser.error(str(exc).replace(GLUONDIST_CHUNK_BYTES, "--chunk-bytes"))
    if args.most < 1 or not args.mbytes > 0:
        parser.error(f"--most {args.most}, --mbytes {args.mbytes:g}: give at least 1 worker "
                     "and more than 0 megabytes")
    if args.json is not None and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    measured, load = [], os.getloadavg()[0]  # the machine is shared: say how busy it was
    with tempfile.TemporaryDirectory() as tmp, \
            netns.Cluster(args.most + 1, tmp, rate=args.rate) as cluster:
        for workers in range(1, args.most + 1):
            for row in bench(cluster, workers, args.mbytes, args.chunk_bytes, args.env)["rows"]:
                kind = "colocated" if row["layout"] == "one host" else row["layout"]
                measured.append((workers, kind, row["step_s"], row["link_efficiency"]))
    rows = sweep_rows(measured, args.mbytes, args.chunk_bytes)
    for r in rows:
        model = "-" if r["predicted_mb_per_s"] is None else f"{r['predicted_mb_per_s']:.1f}"
        print(f"W={r['workers']} {r['layout']:>9}: step {r['step_s']:.3f} s, "
              f"{r['mb_per_s']:.1f} MB/s, model {model} MB/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": shlex.join(["python", *sys.argv]), "rate": args.rate,
                       "mbytes": args.mbytes, "steps": STEPS,
                       "chunk_bytes": args.chunk_bytes, "env": args.env,
                       "chunks_in_flight": chunks_in_flight_from_env(env),
                       "calibrated_by": "1 worker, dedicated",
                       "load_1min": [load, os.getloadavg()[0]], "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
