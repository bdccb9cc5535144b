"""The figures of the docs' Measured page, drawn from the benchmarks' saved results.

    python benchmarks/plots.py [--results benchmarks/results] [--out docs/img]

Reads (each written by the command in parentheses, run from benchmarks/):
  fit_overhead.json     (python fit_overhead.py --repeats 9 --json results/fit_overhead.json)
  loader_overhead.json  (python loader_overhead.py --repeats 7 --json results/loader_overhead.json)
  kvstore_w2.json       (python network.py --only bench --repeats 3 --json results/kvstore_w2.json,
                         as root)
  workers.json          (python workers.py --json results/workers.json, as root)
  compression_accuracy.json  (python compression_accuracy.py --json
                              results/compression_accuracy.json)
  peers.json            (python peers.py --horovod-python PY --env GLUONDIST_CHUNK_BYTES=65536
                         --variant c512=GLUONDIST_CHUNK_BYTES=524288
                         --variant late=GLUONDIST_CHUNK_UPDATES=0 --json results/peers.json,
                         as root)
  peers_512k.json       (python peers.py --horovod-python PY --json results/peers_512k.json,
                         as root, when 512 KiB was the chunk size)
  peers_resnet18_order5.json, peers_mobilenet_rounds5.json, peers_mlp_rounds5.json
                        (python peers.py ... --rounds 5, as root: the commands are in each
                         file's "command" and on docs/measured.md)
and writes fit_vs_hand.png (each pair's fit/hand ratio, arrays and DataLoader), kvstore.png
(the bench table: step time against servers per layout, with the cost model's line),
workers.png (throughput against workers, per layout, with the cost model's line),
compression_accuracy.png (validation accuracy per epoch, a line per compression, a panel per
model), peers.png (epoch time against workers, gluondist's layouts and Horovod, with each
one's byte bound), links.png (each link's rate over one epoch, gluondist with 512 KiB chunks
and as it is against Horovod, per worker count of peers.py's --timeline), models.png
(gluondist's speed over Horovod's on real models, each round and the median) and
learning_curve.png (History.plot of the first fit on docs/index.md, its block run as it is).
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def fit_vs_hand(results, path):
    from matplotlib.figure import Figure
    parts = [("arrays (fit_overhead.py)", "fit_overhead.json"),
             ("DataLoader (loader_overhead.py)", "loader_overhead.json")]
    fig = Figure(figsize=(9, 3.5))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (title, name) in zip(axes, parts):
        with open(os.path.join(results, name)) as f:
            saved = json.load(f)
        ratios = [p["ratio"] for p in saved["pairs"]]
        ax.plot(range(1, len(ratios) + 1), ratios, "o", label="one pair")
        ax.axhline(saved["median"], label=f"median {saved['median']:.3f}")
        ax.axhline(saved["target"], linestyle="--", color="grey", label=f"target {saved['target']}")
        ax.axhline(1.0, linestyle=":", color="black")
        ax.set_xlabel("pair (alternated in one run)")
        ax.set_title(title)
        ax.legend(loc="lower center")  # below the points: y starts at 0
    axes[0].set_ylabel("fit time / hand-loop time (1: as fast)")
    highest = max(max(line.get_ydata()) for ax in axes for line in ax.get_lines())
    axes[0].set_ylim(0, highest * 1.1)  # a ratio reads true against zero
    fig.tight_layout()
    fig.savefig(path)


def kvstore(results, path):
    from gluondist.bench.plot import plot_rows
    with open(os.path.join(results, "kvstore_w2.json")) as f:
        saved = json.load(f)
    plot_rows(saved["rows"], path, title="2 workers, 8 MB in one array, 200 Mbit/s links")


def workers(results, path):
    """Throughput against workers, one series per layout with the model's line; each point
    labelled with the model's error as the kvstore bench labels it. A job that crosses no link
    (one worker beside its server) has no model figure and is left out: the table has it."""
    from matplotlib.figure import Figure
    with open(os.path.join(results, "workers.json")) as f:
        saved = json.load(f)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for layout, marker in (("colocated", "o"), ("dedicated", "s")):
        rows = [r for r in saved["rows"] if r["layout"] == layout and r["predicted_mb_per_s"]]
        w = [r["workers"] for r in rows]
        dots = ax.plot(w, [r["mb_per_s"] for r in rows], marker, label=f"{layout}, measured")
        ax.plot(w, [r["predicted_mb_per_s"] for r in rows], "-", color=dots[0].get_color(),
                label=f"{layout}, cost model")
        for r in rows:
            error = r["predicted_step_s"] / r["step_s"] - 1
            ax.annotate(f"{error:+.0%}" if round(error, 2) else "0%",
                        (r["workers"], r["mb_per_s"]), textcoords="offset points",
                        xytext=(7, -4), fontsize="small")
    ax.set_xticks(range(1, max(r["workers"] for r in saved["rows"]) + 1))
    ax.margins(x=0.15)  # room for the error labels inside the frame
    highest = max(v for r in saved["rows"] if r["predicted_mb_per_s"]
                  for v in (r["mb_per_s"], r["predicted_mb_per_s"]))
    ax.set_ylim(0, highest * 1.35)  # from 0; the legend sits in the room above the points
    ax.set_xlabel("workers W, each on a host of its own")
    ax.set_ylabel(f"MB/s synchronised: workers x {saved['mbytes']:g} MB / step time")
    ax.set_title(f"W workers, W servers: {saved['mbytes']:g} MB per worker per step, "
                 f"{saved['rate']} links", fontsize="medium")
    ax.legend(loc="upper left", fontsize="small", ncol=2)
    ax.text(0.99, 0.02, "beside each point: the model's error, predicted / measured step "
            "time - 1\n(-10%: the step took longer than predicted)", transform=ax.transAxes,
            ha="right", va="bottom", fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path)


def compression_accuracy(results, path):
    from matplotlib.figure import Figure
    with open(os.path.join(results, "compression_accuracy.json")) as f:
        saved = json.load(f)
    names = list(saved["runs"][0]["models"])
    fig = Figure(figsize=(9, 3.8))
    axes = fig.subplots(1, len(names), sharey=True)
    for ax, name in zip(axes, names):
        for run in saved["runs"]:
            acc = run["models"][name]["val_accuracy"]
            ax.plot(range(1, len(acc) + 1), acc, marker=".",
                    label=f"{run['compression']} (final {acc[-1]:.3f})")
        ax.set_title(f"{name}, 2 workers")
        ax.set_xlabel("epoch")
        ax.legend(loc="best")
    axes[0].set_ylabel("validation accuracy")
    fig.tight_layout()
    fig.savefig(path)


def peers(results, path):
    """Epoch time against workers: a series per arm of benchmarks/peers.py, its byte bound
    dotted in the same colour."""
    from matplotlib.figure import Figure
    with open(os.path.join(results, "peers.json")) as f:
        saved = json.load(f)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for arm in dict.fromkeys(r["arm"] for r in saved["rows"]):
        rows = [r for r in saved["rows"] if r["arm"] == arm]
        w = [r["workers"] for r in rows]
        dots = ax.plot(w, [r["epoch_s"] for r in rows], "o-", label=arm)
        ax.plot(w, [r["bound_s"] for r in rows], ":", color=dots[0].get_color())
    ax.set_xticks(sorted({r["workers"] for r in saved["rows"]}))
    ax.set_xlabel("workers (one per host)")
    ax.set_ylabel("epoch time, s (dotted: its byte bound)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"fit against Horovod, 8 MB of gradients, {saved['rate']} links")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def links(results, path):
    """Each host's uplink over one epoch (Mbit/s it sent, sampled every 10 ms; the y axis stops
    at twice the rate, above which a sample only says the sampler woke late): a column per
    system, a row per worker count of the timelines. gluondist's first with the chunks before
    issue 34 (peers_512k.json, the run that found why its links idled), then as they are."""
    from matplotlib.figure import Figure
    timelines = []
    for name in ("peers_512k.json", "peers.json"):
        with open(os.path.join(results, name)) as f:
            saved = json.load(f)
        rate_text = saved["rate"]  # peers.py's --rate (200mbit): the same in both runs
        for tl in saved["timelines"]:
            if tl["arm"] != "horovod":
                timelines.append({**tl, "arm": f"{tl['arm']}, {saved['chunk_bytes'] >> 10} "
                                                 "KiB chunks"})
            elif name == "peers.json":
                timelines.append(tl)
    counts = sorted({t["workers"] for t in timelines})
    arms = list(dict.fromkeys(t["arm"] for t in timelines))
    fig = Figure(figsize=(5 * len(arms), 3 * len(counts)))
    axes = fig.subplots(len(counts), len(arms), squeeze=False, sharey=True)
    for tl in timelines:
        ax = axes[counts.index(tl["workers"])][arms.index(tl["arm"])]
        for name, series in tl["links"].items():
            if name.endswith(" up"):  # the pushes and the servers' replies leave here
                ax.plot(tl["t"], series["mbit_s"], linewidth=0.8,
                        label=f"{name[:-3]} ({series['idle_share']:.0%} idle)")
        for t in tl["steps"]:
            ax.axvline(t, color="grey", linewidth=0.4)
        ax.set_title(f"{tl['arm']}, {tl['workers']} workers: epoch "
                     f"{tl['epoch_seconds'][-1]:.2f} s", fontsize="small")
        ax.set_xlabel("s into the epoch (grey: worker 0 issues a step)")
        ax.legend(fontsize="x-small", loc="lower right")
    number, unit = rate_text[:-4], rate_text[-4:]
    rate = float(number) * {"kbit": 1e-3, "mbit": 1, "gbit": 1e3}[unit]
    for row in axes:
        row[0].set_ylabel("sent, Mbit/s")
        row[0].set_ylim(0, 2 * rate)
    fig.tight_layout()
    fig.savefig(path)


# the runs of real models at both sides' defaults, 5 alternating rounds each
MODEL_RUNS = ("peers_resnet18_order5.json", "peers_mobilenet_rounds5.json",
              "peers_mlp_rounds5.json")


def models(results, path):
    """gluondist's speed ÷ Horovod's on real models, at both sides' defaults: a column per
    layout (net, links, workers, arm) of MODEL_RUNS, each round's ratio a dot and the median
    a bar, against Horovod's defaults and (where the run had it) autotuned Horovod."""
    from matplotlib.figure import Figure
    columns = []
    for name in MODEL_RUNS:
        with open(os.path.join(results, name)) as f:
            saved = json.load(f)
        rows = saved["rows"]
        for row in rows:
            if row["trains"] != "gluondist":
                continue
            peers = {r["arm"]: r["rounds"] for r in rows
                     if r["trains"] == "horovod" and r["workers"] == row["workers"]}
            label = (f"{saved['model']}\n{saved['rate']}, W={row['workers']}"
                     f"\n{row['arm'].replace('gluondist ', '')}")
            columns.append((label, {arm: [h / g for h, g in zip(peer, row["rounds"])]
                                    for arm, peer in peers.items()}))
    fig = Figure(figsize=(1.6 * len(columns) + 2, 4.5))
    ax = fig.subplots()
    arms = list(dict.fromkeys(arm for _, against in columns for arm in against))
    width = 0.8 / len(arms)
    for k, arm in enumerate(arms):
        colour = f"C{k}"
        for x, (_, against) in enumerate(columns):
            ratios = against.get(arm)
            if not ratios:
                continue
            at = x - 0.4 + width * (k + 0.5)
            ax.bar(at, statistics.median(ratios), width * 0.9, color=colour, alpha=0.4,
                   label=f"against {arm}")
            ax.plot([at] * len(ratios), ratios, "o", color=colour, markersize=3)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([label for label, _ in columns], fontsize="small")
    ax.set_ylim(0.8, max(1.4, ax.get_ylim()[1]))
    ax.set_ylabel("gluondist's speed / Horovod's")
    ax.set_title("Real models at the defaults: each round (dots) and the median (bars)")
    shown = dict(zip(*ax.get_legend_handles_labels()[::-1]))  # one entry per arm
    ax.legend(shown.values(), shown.keys(), fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


def learning_curve(path):
    """History.plot of the first fit on Getting started: that page's block, run as it is in a
    scratch directory (it writes ckpt/ and curves.png there)."""
    import shutil
    import tempfile
    page = open(os.path.join(HERE, "..", "docs", "index.md")).read()
    section = page.split("## The first fit", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            exec(compile(block, "docs/index.md (the first fit)", "exec"), {})
        finally:
            os.chdir(here)
        shutil.copy(os.path.join(scratch, "curves.png"), path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--results", default=os.path.join(HERE, "results"))
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "img"))
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    fit_vs_hand(args.results, os.path.join(args.out, "fit_vs_hand.png"))
    kvstore(args.results, os.path.join(args.out, "kvstore.png"))
    workers(args.results, os.path.join(args.out, "workers.png"))
    compression_accuracy(args.results, os.path.join(args.out, "compression_accuracy.png"))
    peers(args.results, os.path.join(args.out, "peers.png"))
    links(args.results, os.path.join(args.out, "links.png"))
    models(args.results, os.path.join(args.out, "models.png"))
    learning_curve(os.path.join(args.out, "learning_curve.png"))


if __name__ == "__main__":
    main()
