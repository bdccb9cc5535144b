"""The kvstore bench's table as a picture: step time against servers, one panel per layout,
the measured points with the cost model's line (`gluondist bench kvstore --plot FILE`, and
benchmarks/plots.py from a saved `--json` line)."""
from __future__ import annotations

from typing import Optional, Sequence


def plot_rows(rows: Sequence[dict], path: Optional[str] = None, title: Optional[str] = None):
    """Draw ``rows`` (the ``"rows"`` of the bench's JSON line) and return the matplotlib
    Figure, each measured point labelled with the model's error; saved to ``path`` when given.
    Needs matplotlib: pip install 'gluondist[plot]'."""
    if not rows:
        raise ValueError("plot_rows: the bench table has no rows to plot")
    try:
        from matplotlib.figure import Figure  # no pyplot: works headless and in notebooks
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib: pip install 'gluondist[plot]'") from exc
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    fig = Figure(figsize=(4.5 * len(layouts), 3.5))
    axes = fig.subplots(1, len(layouts), squeeze=False, sharey=True)[0]
    for ax, layout in zip(axes, layouts):
        mine = sorted((r for r in rows if r["layout"] == layout), key=lambda r: r["servers"])
        servers = [r["servers"] for r in mine]
        ax.plot(servers, [r["step_s"] for r in mine], "o", label="measured")
        for r in mine:  # the model's error, as the table's column has it
            error = r["predicted_step_s"] / r["step_s"] - 1
            ax.annotate(f"{error:+.0%}", (r["servers"], r["step_s"]), textcoords="offset points",
                        xytext=(6, -4), fontsize="small")
        ax.plot(servers, [r["predicted_step_s"] for r in mine], "-", label="cost model")
        whole = [(r["servers"], r["unchunked_step_s"]) for r in mine
                 if r.get("unchunked_step_s") is not None]
        if whole:
            ax.plot(*zip(*whole), "x", label="measured, arrays whole")
        ax.set_xticks(servers)
        ax.set_xlabel("servers")
        ax.set_title(layout)
        ax.legend()
    axes[0].set_ylabel("step time (s)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig
