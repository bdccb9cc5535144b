"""gluondist against Horovod on the same links: fit under ``gluondist launch`` against
``horovod.mxnet.DistributedTrainer`` under ``horovodrun --gloo``, one worker per
network-namespace host, every link shaped to RATE both ways.

    python benchmarks/peers.py --horovod-python PY [--model mlp] [--rate 200mbit]
                               [--workers 2 3 4]
                               [--rounds 2] [--epochs 4] [--arms ARM ...]
                               [--env K=V ...] [--variant LABEL=K=V[,K=V] ...]
                               [--parts] [--timeline 3 4]
                               [--timeline-arms ARM ...] [--json FILE]

(as root; tests/netns.py's hosts.) PY is a Python with ``mxnet==1.9.1``, ``numpy<1.24`` and
``horovod==0.28.1`` built with Gloo (docs/measured.md says how to install it). gluondist runs
from the Python that runs this script, which must have gluondist and MXNet (the README's
``.venv/bin/python``). Horovod is needed by this benchmark only, never by gluondist.

The training is the same on both sides (benchmarks/peer_train.py): ``--model``, by default a
net dominated by one 8 MB layer, random data, 64 samples per worker per step, 10 steps an
epoch; or a model-zoo net (``resnet18_v1``, ``mobilenet1.0``, with ``@SIZE`` for larger
inputs than 32 x 32), hybridized on both sides, 32 samples per worker per step, 4 steps an
epoch; SGD with momentum, one OpenMP thread per worker. For each worker count W, in every round (the arms' order alternating
from round to round), one job of each arm:

- ``gluondist S=1``: one server, on the first worker's host;
- ``gluondist S=W``: W servers, one on each worker's host (colocated);
- ``gluondist dedicated``: W servers on W hosts of their own (--server-hosts);
- ``horovod``: ring allreduce over Gloo, ``horovodrun`` started on the first host;
- ``horovod autotune`` (on ``--arms`` only): the same with ``horovodrun --autotune``, which
  tunes Horovod's fusion threshold and cycle time over the job's first steps.

The figure of a job is the median epoch time after its first epoch (worker 0's clock, each
epoch to the end of its last update); of an arm, the median over the rounds. Beside each, the
byte bound: the busiest link direction's bytes per step (gluondist.bench.model for the
parameter server, 2M(W-1)/W for the ring) at RATE, times the steps of an epoch. And per job, the packets
the links dropped (tc tbf's queues, both ends of every host's cable) and the TCP segments the
hosts sent again, summed over the hosts (``dropped_resent``); and the machine's cores busy
over the job's epochs after the first (``busy_cores``: their median per job, from /proc/stat;
the hosts share the machine's cores, so it counts the workers, the servers and the kernel's
network work alike). For gluondist's jobs, the chunk size each chose (``chunks_chosen``), the
probe's table that choice rests on (``chunk_probes``: each size's seconds for one sum and the
sums a measurement took; the seconds alone in results/peers_resnet18_1gbit_probe.json and
peers_resnet18_1gbit_sums.json, the first runs to keep it) and the head of its order
(``heads_chosen``).

``--env K=V`` sets K=V in every gluondist job (``gluondist launch --env``), such as
GLUONDIST_CHUNK_BYTES=65536; ``--variant LABEL=K=V[,K=V]`` adds an arm ``gluondist S=W
LABEL``: S=W with those settings as well (over --env's), such as other chunk sizes or chunks
in flight.

``--parts``: four more arms that show where an epoch goes (benchmarks/peer_train.py):
``gluondist S=W loop``, S=W trained by a hand-written loop of gluondist's parts instead of
``fit``; ``gluondist S=W comm`` and ``horovod comm``, each side's loop without the net's
passes (every step synchronises and applies what the gradient arrays hold); ``compute``,
the net's passes and update alone, every worker at once with no exchange. A comm arm's
speed ratio is against ``horovod comm``. Each row says how its jobs trained (``trains``:
peer_train.py's way) and which arm its ratio is against (``ratio_against``).

``--timeline W ...``: for those worker counts, one more job of each of ``--timeline-arms``
(default ``gluondist S=W`` and ``horovod``), with every link's byte counters sampled every
10 ms (from the bridge's side of each host's cable, /sys/class/net/PORT/statistics) and
worker 0's step times; saved in the JSON for benchmarks/plots.py's timeline.
"""
import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))
import netns  # noqa: E402
from gluondist.bench.model import Layout, link_bytes  # noqa: E402
from gluondist.kv.chunks import CHUNK_BYTES, chunk_bounds  # noqa: E402
from gluondist.launcher.errors import LaunchError  # noqa: E402
from gluondist.launcher.options import check_env, env_pairs  # noqa: E402

TRAIN = os.path.join(HERE, "peer_train.py")
ARMS = ("gluondist S=1", "gluondist S=W", "gluondist dedicated", "horovod")
HOROVOD_ARMS = ("horovod", "horovod autotune")  # the second on --arms only
# --parts: arm -> (the arm whose hosts and servers it uses, peer_train.py's way to train)
PARTS = {"gluondist S=W loop": ("gluondist S=W", "gluondist-loop"),
         "gluondist S=W comm": ("gluondist S=W", "gluondist-comm"),
         "horovod comm": ("horovod", "horovod-comm"),
         "compute": ("gluondist S=W", "compute")}
SAMPLE_S = 0.01


def model_of(text: str):
    """peer_train.py's MODEL ``text`` (peer_train.Model), imported here without the
    OMP_NUM_THREADS it sets for its workers."""
    before = os.environ.get("OMP_NUM_THREADS")
    import peer_train
    if before is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = before
    return peer_train.Model(text)


def bound_s(arm: str, workers: int, bits: float, chunk_bytes: int, sizes, steps) -> float:
    """The epoch's time if the busiest link direction were never idle: ``steps`` steps that
    exchange arrays of ``sizes`` elements (float32)."""
    if arm in HOROVOD_ARMS:
        per_step = 2 * sum(sizes) * 4 * (workers - 1) / workers
    else:
        hosts = tuple(f"h{i}" for i in range(workers))
        servers = {"gluondist S=1": hosts[:1], "gluondist S=W": hosts,
                   "gluondist dedicated": tuple(f"s{i}" for i in range(workers))}[arm]
        sent = [b - a for n in sizes for a, b in chunk_bounds(n, 4, chunk_bytes)]
        per_step = link_bytes(Layout(hosts, servers), sent).bound()
    return steps * per_step * 8 / bits


def gluondist_job(cluster, work, arm, workers, epochs, stamps, env, mode, model):
    hosts, extra = cluster.hosts[:workers], cluster.hosts[workers:2 * workers]
    settings = [f"--env={k}={v}" for k, v in (env or {}).items()]
    servers = 1 if arm == "gluondist S=1" else workers
    layout = ["--server-hosts", ",".join(extra)] if arm == "gluondist dedicated" else []
    out = os.path.join(work, "epochs.json")
    argv = [sys.executable, "-m", "gluondist.cli", "launch", *ssh_launch(cluster, hosts),
            "-n", str(workers), "-s", str(servers), *layout, *settings, TRAIN, mode, out,
            str(epochs), model, *([stamps] if stamps else [])]
    run(argv, work)
    return out


def ssh_launch(cluster, hosts) -> list:
    """gluondist launch's options that run a worker on each of ``hosts`` of ``cluster``, over
    ssh."""
    return ["--launcher", "ssh", "--ssh-config", cluster.ssh_config, "-H",
            ",".join(f"{h}:1" for h in hosts)]


def link_hosts(stack, count: int, rate: str):
    """``count`` namespace hosts (tests/netns.py), each linked at ``rate``, removed when
    ``stack`` closes; the script exits in one line where they cannot be built here."""
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    work = stack.enter_context(tempfile.TemporaryDirectory())
    return stack.enter_context(netns.Cluster(count, os.path.join(work, "net"), rate=rate,
                                             own_hostname=True))


# How Horovod 0.28.1's jobs on model-zoo nets were seen to fail now and then: Gloo's size
# check (a rank received a message of another size than the buffer it posted), and MXNet
# refusing a gradient still in oneDNN's layout when Horovod read it
HOROVOD_FLAKES = ("gloo::EnforceNotMet", "We can't generate TBlob for MKLDNN data")
RETRIES = 2


def horovod_job(cluster, work, python, workers, epochs, stamps, mode, model, autotune=False):
    """Horovod's job; run again, at most RETRIES times, where it ended on one of
    HOROVOD_FLAKES (3 of about 40 Horovod jobs on model-zoo nets at 1 Gbit/s, in ``horovod``
    and ``horovod comm``), counted in its row's ``horovod_retries`` (the row's
    ``dropped_resent`` then counts the failed attempts' packets too)."""
    out = os.path.join(work, "epochs.json")
    for attempt in range(RETRIES + 1):
        try:
            horovod_run(cluster, work, python, workers,
                        [TRAIN, mode, out, str(epochs), model, *([stamps] if stamps else [])],
                        autotune)
            return out, attempt
        except SystemExit:
            with open(os.path.join(work, "job.log")) as f:
                log = f.read()
            flake = [f for f in HOROVOD_FLAKES if f in log]
            if not flake or attempt == RETRIES:
                raise
            print(f"horovod's job ended on {flake[0]!r}; again ({attempt + 1} of {RETRIES})",
                  flush=True)


def horovod_run(cluster, work, python, workers, argv, autotune=False):
    """``python ARGV`` on the first ``workers`` hosts under horovodrun (with ``autotune``,
    ``--autotune``: Horovod tunes its fusion threshold and cycle time online), from inside the
    first host (Gloo binds what the machine's name resolves to: the cluster maps it to each
    host's own address); its ssh reads the cluster's config through a wrapper first on PATH,
    since horovodrun passes no ssh options but a key."""
    hosts = cluster.hosts[:workers]
    wrapper = os.path.join(work, "bin")
    os.makedirs(wrapper, exist_ok=True)
    with open(os.path.join(wrapper, "ssh"), "w") as f:
        f.write(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {cluster.ssh_config} \"$@\"\n")
    os.chmod(os.path.join(wrapper, "ssh"), 0o755)
    bindir = os.path.dirname(python)
    run(["ip", "netns", "exec", cluster.ns[hosts[0]], "env",
         f"PATH={wrapper}:{bindir}:{os.environ['PATH']}", os.path.join(bindir, "horovodrun"),
         "--gloo", *(["--autotune"] if autotune else []), "--network-interface", "eth0",
         "--ssh-identity-file",
         os.path.join(cluster.dir, "id"), "-np", str(workers), "-H",
         ",".join(f"{h}:1" for h in hosts), python, *argv], work)


def run(argv, work, timeout=600):
    with open(os.path.join(work, "job.log"), "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:  # horovodrun and the launcher end their jobs on SIGTERM
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
    if code != 0:
        with open(os.path.join(work, "job.log")) as f:
            raise SystemExit(f"{argv[:6]}... exited {code}:\n{f.read()[-3000:]}")


def losses(cluster) -> Tuple[int, int]:
    """Packets every host's links have dropped so far (tc tbf's queue, both ends of each
    host's cable) and TCP segments every host has sent again."""
    drops = retrans = 0
    for h in cluster.hosts:
        for where, dev in ((cluster.ns[h], "eth0"), (cluster.bridge_ns, cluster.port[h])):
            shown = subprocess.run(["ip", "netns", "exec", where, "tc", "-s", "qdisc", "show",
                                    "dev", dev], capture_output=True, text=True, check=True)
            drops += int(re.search(r"dropped (\d+)", shown.stdout).group(1))
        snmp = subprocess.run(["ip", "netns", "exec", cluster.ns[h], "cat", "/proc/net/snmp"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
        names, values = [line.split() for line in snmp if line.startswith("Tcp:")]
        retrans += int(values[names.index("RetransSegs")])
    return drops, retrans


def own_way(arm: str) -> str:
    """peer_train.py's way to train for one of ARMS (or a variant of S=W)."""
    return "horovod" if arm in HOROVOD_ARMS else "gluondist"


def job(cluster, tmp, python, arm, workers, epochs, stamps=None, env=None, mode=None,
        model="mlp"):
    """The job's epoch times (worker 0's, ``epoch_seconds``), the chunk size a gluondist
    job chose (``chunk_bytes``, None where it was given), the machine's cores busy in each
    epoch (``busy_cores``) and how often Horovod's job was run again (``retries``); ``env``:
    a variant's settings (gluondist only); ``mode``: peer_train.py's way to train (default
    the arm's own)."""
    work = tempfile.mkdtemp(dir=tmp)
    mode = mode or own_way(arm)
    retries = 0
    if arm in HOROVOD_ARMS:
        out, retries = horovod_job(cluster, work, python, workers, epochs, stamps, mode, model,
                                   arm == "horovod autotune")
    else:
        out = gluondist_job(cluster, work, arm, workers, epochs, stamps, env, mode, model)
    with open(out) as f:
        return {**json.load(f), "retries": retries}


class Sampler:
    """Every host's link bytes each SAMPLE_S, read from the bridge's side of its cable (the
    port's tx is what the host receives, its rx what it sends), by a process in the bridge's
    namespace, until the ``with`` ends."""

    def __init__(self, cluster, hosts, path):
        self.ports = [cluster.port[h] for h in hosts]
        self.cmd = ["ip", "netns", "exec", cluster.bridge_ns, sys.executable, __file__,
                    "--sample", path, *self.ports]
        self.path = path

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "sampling"
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)

    def read(self):
        with open(self.path) as f:
            return json.load(f)


def sample(path, ports):
    """(In the bridge's namespace) counters of ``ports`` every SAMPLE_S until SIGTERM:
    ``{"t": [...], PORT: {"down": [...], "up": [...]}}``, bytes since the start."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    files = {p: [open(f"/sys/class/net/{p}/statistics/{c}_bytes") for c in ("tx", "rx")]
             for p in ports}

    def read():
        row = []
        for down, up in files.values():
            for f in (down, up):
                f.seek(0)
                row.append(int(f.read()))
        return row
    base, times, rows = read(), [], []
    print("sampling", flush=True)
    tick = time.monotonic()
    while not stop:
        times.append(time.time())
        rows.append([a - b for a, b in zip(read(), base)])
        tick += SAMPLE_S
        time.sleep(max(0.0, tick - time.monotonic()))
    out = {"t": times}
    for i, p in enumerate(ports):
        out[p] = {"down": [r[2 * i] for r in rows], "up": [r[2 * i + 1] for r in rows]}
    with open(path, "w") as f:
        json.dump(out, f)


def timeline(cluster, tmp, python, arm, workers, epochs, bits, env=None, model="mlp"):
    """One job with its links sampled: the epoch before the last's steps, and each link's
    rate per sample in that window (Mbit/s), idle share (below 10% of the rate)."""
    work = tempfile.mkdtemp(dir=tmp)
    stamps = os.path.join(work, "stamps.json")
    hosts = cluster.hosts[:workers] + (cluster.hosts[workers:2 * workers]
                                       if arm == "gluondist dedicated" else [])
    with Sampler(cluster, hosts, os.path.join(work, "links.json")) as sampler:
        seconds = job(cluster, tmp, python, arm, workers, epochs, stamps, env,
                      model=model)["epoch_seconds"]
    links = sampler.read()
    with open(stamps) as f:
        steps = json.load(f)
    last = epochs - 1  # the last epoch, from the end of the one before
    ends = {e: t for e, s, t in steps if s == -1}
    start, end = ends[last - 1], ends[last]
    picked = [i for i, t in enumerate(links["t"]) if start <= t <= end]
    t0 = links["t"][picked[0]]
    series = {}
    for h, port in zip(hosts, (cluster.port[h] for h in hosts)):
        for d in ("down", "up"):
            c = links[port][d]
            mbit = [(c[i] - c[i - 1]) * 8 / (links["t"][i] - links["t"][i - 1]) / 1e6
                    for i in picked if i > 0]
            series[f"{h} {d}"] = {
                "mbit_s": [round(m, 1) for m in mbit],
                "idle_share": sum(m < 0.1 * bits / 1e6 for m in mbit) / max(1, len(mbit)),
                "mean_mbit_s": (c[picked[-1]] - c[picked[0]]) * 8 / (end - start) / 1e6}
    return {"arm": arm, "workers": workers, "epoch_seconds": seconds,
            "t": [round(links["t"][i] - t0, 4) for i in picked if i > 0],
            "steps": [round(t - t0, 4) for e, s, t in steps if e == last and s >= 0],
            "links": series}


def writable_file(path: str) -> bool:
    """Whether ``path`` names a file (not a directory) in a directory this user can write."""
    parent = os.path.dirname(os.path.abspath(path))
    return bool(path) and not os.path.isdir(path) and os.path.isdir(parent) and \
        os.access(parent, os.W_OK | os.X_OK)


def checked(parser, args):
    """Every option checked before any host is built or Horovod probed (a mistake is one line
    and exit 2); returns the rate in bits per second, --env's settings, and the variants (arm:
    its base arm and settings)."""
    if importlib.util.find_spec("mxnet") is None:
        parser.error(f"{sys.executable} has no mxnet: run this script with gluondist's Python "
                     "(the README's .venv/bin/python)")
    if not args.horovod_python:
        parser.error("give --horovod-python PY: a Python with horovod.mxnet (docs/measured.md)")
    horovodrun = os.path.join(os.path.dirname(args.horovod_python), "horovodrun")
    if not all(os.path.isfile(p) and os.access(p, os.X_OK)
               for p in (args.horovod_python, horovodrun)):
        parser.error(f"--horovod-python {args.horovod_python}: no Python with horovodrun beside "
                     "it; give the Python of a venv with horovod.mxnet (docs/measured.md)")
    for name, given in (("--workers", args.workers), ("--timeline", args.timeline),
                        ("--arms", args.arms), ("--timeline-arms", args.timeline_arms)):
        if len(set(given)) != len(given):
            parser.error(f"{name} {' '.join(map(str, given))}: give each once")
    if args.json is not None and not writable_file(args.json):
        parser.error(f"--json {args.json!r}: give a FILE in a directory you can write (the "
                     "result is written at the end)")
    if min(args.workers + args.timeline) < 2:
        parser.error("--workers, --timeline: give 2 or more workers each; one has no peer")
    try:
        model_of(args.model).net()
    except ValueError:
        parser.error(f"--model {args.model!r}: give mlp or a model-zoo name (with @SIZE, a whole "
                     "number, for SIZE x SIZE inputs), such as resnet18_v1@96")
    if args.epochs < 2:
        parser.error(f"--epochs {args.epochs}: give 2 or more; the first epoch is not counted")
    if args.rounds < 0 or (args.rounds == 0 and not args.timeline):
        parser.error(f"--rounds {args.rounds}: give 1 or more, or 0 with --timeline W "
                     "for timelines only")
    try:
        bits = netns.rate_bits(args.rate)
        common = env_pairs(args.env)
        check_env(common)
    except (LaunchError, ValueError) as exc:
        parser.error(str(exc))
    variants = {}  # arm: (its base arm, its settings)
    for text in args.variant:
        label, _, settings = text.partition("=")
        try:
            env = env_pairs(settings.split(","))
        except LaunchError:
            parser.error(f"--variant {text}: give LABEL=K=V[,K=V]")
        try:
            check_env({**common, **env})
        except LaunchError as exc:
            parser.error(f"--variant {text}: {exc}")
        if args.parts and f"gluondist S=W {label}" in PARTS:
            parser.error(f"--variant {text}: {label!r} names an arm of --parts; give the "
                         "variant another label")
        if f"gluondist S=W {label}" in variants:
            parser.error(f"--variant {text}: the label {label!r} is given twice; give each "
                         "variant its own")
        variants[f"gluondist S=W {label}"] = ("gluondist S=W", {**common, **env})
    return bits, common, variants


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--horovod-python", metavar="PY", help="required")
    parser.add_argument("--model", default="mlp", help="peer_train.py's MODEL: mlp, or a "
                        "model-zoo net such as resnet18_v1, mobilenet1.0, resnet18_v1@96 "
                        "(default: %(default)s)")
    parser.add_argument("--rate", default="200mbit", help="every link's rate, both ways, as "
                        "tc gives it (default: %(default)s)")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3, 4],
                        help="worker counts W, one host each, 2 or more (default: 2 3 4)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="jobs of each arm per W, alternating (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of a job, 2 or more: the "
                        "first is not counted (default: %(default)s)")
    parser.add_argument("--parts", action="store_true",
                        help="also the arms " + ", ".join(repr(a) for a in PARTS) + ": a "
                             "hand-written loop, and each side without the net's passes (a "
                             "comm arm's speed ratio is against 'horovod comm')")
    parser.add_argument("--timeline", type=int, nargs="*", default=[3, 4], metavar="W",
                        help="worker counts to sample the links at, one more job of each "
                             "--timeline-arms; none if given bare (default: 3 4)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS + HOROVOD_ARMS[1:],
                        help="(default: all but 'horovod autotune')")
    parser.add_argument("--env", action="append", default=[], metavar="K=V",
                        help="set in every gluondist job, such as GLUONDIST_CHUNK_BYTES=65536")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=K=V[,K=V]",
                        help="one more arm: gluondist S=W with these --env settings, such "
                             "as c256k4=GLUONDIST_CHUNK_BYTES=262144,GLUONDIST_CHUNKS_IN_FLIGHT=4")
    parser.add_argument("--timeline-arms", nargs="+", default=["gluondist S=W", "horovod"],
                        choices=ARMS, metavar="ARM")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--sample", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        return sample(args.sample[0], args.sample[1:])
    bits, common, variants = checked(parser, args)
    model = model_of(args.model)
    sizes = model.sizes()
    most = max(args.workers + args.timeline)
    parts = PARTS if args.parts else {}
    args.arms = args.arms + list(variants) + list(parts)
    side = lambda arm: parts.get(arm, (arm, own_way(arm)))  # (hosts and servers, way to train)
    base = lambda arm: variants.get(arm, (side(arm)[0], None if side(arm)[0] in HOROVOD_ARMS
                                          else common or None))
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    probe = subprocess.run([args.horovod_python, "-c", "import horovod.mxnet"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit(f"--horovod-python {args.horovod_python} cannot import horovod.mxnet "
                         f"(docs/measured.md says how to install it): {probe.stderr[-300:]}")
    runs = {(w, arm): [] for w in args.workers for arm in args.arms}
    lost = {key: [] for key in runs}  # [drops, retransmissions] per job
    chose = {key: [] for key in runs}  # the chunk size each gluondist job chose
    probes = {key: [] for key in runs}  # what it rests on: each size's seconds in the probe
    heads = {key: [] for key in runs}  # the head's share each job chose (gluondist.kv.order)
    busy = {key: [] for key in runs}  # the machine's cores busy, median epoch after the first
    retried = {key: [] for key in runs}  # Horovod's jobs run again (horovod_job)
    result = {"command": shlex.join(["python", *sys.argv]), "rate": args.rate,
              "model": args.model, "arrays": len(sizes), "mbytes": sum(sizes) * 4 / 1e6,
              "epochs": args.epochs, "steps": model.steps, "env": common,
              # given by --env, else None: each job chose (the rows' chunks_chosen)
              "chunk_bytes": int(common["GLUONDIST_CHUNK_BYTES"])
              if "GLUONDIST_CHUNK_BYTES" in common else None,
              "load_1min": [os.getloadavg()[0]], "rows": [], "timelines": []}
    with tempfile.TemporaryDirectory() as tmp, \
            netns.Cluster(2 * most, os.path.join(tmp, "net"), rate=args.rate,
                          own_hostname=True) as cluster:
        for r in range(args.rounds):
            for w in args.workers:
                for arm in (args.arms if r % 2 == 0 else args.arms[::-1]):
                    arm_of, env = base(arm)
                    before = losses(cluster)
                    ran = job(cluster, tmp, args.horovod_python, arm_of, w, args.epochs,
                              env=env, mode=side(arm)[1], model=args.model)
                    seconds = ran["epoch_seconds"]
                    chose[w, arm].append(ran.get("chunk_bytes"))
                    probes[w, arm].append(ran.get("probe"))
                    heads[w, arm].append((ran.get("order") or {}).get("head"))
                    lost[w, arm].append([b - a for a, b in zip(before, losses(cluster))])
                    runs[w, arm].append(statistics.median(seconds[1:]))
                    busy[w, arm].append(statistics.median(ran["busy_cores"][1:]))
                    retried[w, arm].append(ran["retries"])
                    print(f"round {r + 1}, W={w}, {arm}: {runs[w, arm][-1]:.2f} s an epoch "
                          f"({', '.join(f'{s:.2f}' for s in seconds)}); packets dropped, "
                          f"segments sent again: {lost[w, arm][-1]}; chunks chosen: "
                          f"{chose[w, arm][-1]}; head {heads[w, arm][-1]}; cores busy "
                          f"{busy[w, arm][-1]:.2f}", flush=True)
        for w in args.timeline:
            for arm in args.timeline_arms:
                result["timelines"].append(
                    timeline(cluster, tmp, args.horovod_python, arm, w, args.epochs, bits,
                             base(arm)[1], args.model))
    result["load_1min"].append(os.getloadavg()[0])
    for w in args.workers:
        for arm in (a for a in args.arms if runs[w, a]):  # --rounds 0: timelines only
            peer = "horovod comm" if side(arm)[1].endswith("-comm") else "horovod"
            horovod = statistics.median(runs[w, peer]) if runs.get((w, peer)) else None
            epoch = statistics.median(runs[w, arm])
            arm_of, env = base(arm)
            chosen = [c for c in chose[w, arm] if c is not None]  # the job's own choice
            chunk = int((env or {}).get("GLUONDIST_CHUNK_BYTES", statistics.median_low(chosen)
                                        if chosen else CHUNK_BYTES))
            row = {"workers": w, "arm": arm, "env": env, "epoch_s": epoch,
                   "trains": side(arm)[1],
                   "ratio_against": peer,
                   "rounds": runs[w, arm], "bound_s": bound_s(arm_of, w, bits, chunk, sizes,
                                                                  model.steps),
                   "dropped_resent": lost[w, arm], "chunks_chosen": chose[w, arm],
                   "chunk_probes": probes[w, arm],
                   "heads_chosen": heads[w, arm],
                   "busy_cores": busy[w, arm], "horovod_retries": retried[w, arm],
                   "horovod_speed_ratio":
                   None if horovod is None else horovod / epoch}
            if side(arm)[1] == "compute":  # sends nothing: no bound, no peer
                row.update(bound_s=None, horovod_speed_ratio=None, ratio_against=None)
                horovod = None
            row["over_bound"] = None if row["bound_s"] is None else epoch / row["bound_s"]
            result["rows"].append(row)
            bound = "" if row["over_bound"] is None else \
                f", {row['over_bound']:.2f}x its byte bound"
            print(f"W={w} {arm:>20}: {epoch:.2f} s an epoch{bound}, "
                  f"{statistics.median(busy[w, arm]):.2f} cores busy" +
                  ("" if horovod is None else
                                  f", {row['horovod_speed_ratio']:.3f}x {peer}'s speed"),
                  flush=True)
    for tl in result["timelines"]:
        idle = {k: round(v["idle_share"], 2) for k, v in tl["links"].items()}
        print(f"timeline W={tl['workers']} {tl['arm']}: idle share per link {idle}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
