"""The kvstore bench's table as a picture: step time against servers, one panel per layout,
the measured points with the cost model's line (`gluondist bench kvstore --plot FILE`, and
benchmarks/plots.py from a saved `--json` line)."""
from __future__ import annotations

from typing import Optional, Sequence

# what the number beside each point means, and which way its sign goes
SIGN = ("beside each point: the model's error, predicted / measured - 1 (-10%: the step took "
        "longer than the model predicted)")


def plot_rows(rows: Sequence[dict], path: Optional[str] = None, title: Optional[str] = None):
    """Draw ``rows`` (the ``"rows"`` of the bench's JSON line) and return the matplotlib
    Figure, each measured point labelled with the model's error; saved to ``path`` when given.
    Needs matplotlib (the plot extra: gluondist.extra_hint('plot'))."""
    if not rows:
        raise ValueError("plot_rows: the bench table has no rows to plot")
    try:
        from matplotlib.figure import Figure  # no pyplot: works headless and in notebooks
    except ImportError as exc:
        from .. import extra_hint
        raise ImportError(f"--plot needs matplotlib: {extra_hint('plot')}") from exc
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    fig = Figure(figsize=(max(9.0, 4.5 * len(layouts)), 4.2))  # room for the notes below
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
        ax.margins(x=0.3)  # room for the error labels inside the frame
        ax.set_xlabel("servers")
        ax.set_title(layout)
    axes[0].set_ylabel("step time (s)")
    highest = max(v for r in rows for v in (r["step_s"], r["predicted_step_s"],
                                             r.get("unchunked_step_s") or 0))
    axes[0].set_ylim(0, highest * 1.15)  # a time reads true against zero; shared by the panels
    if title:
        fig.suptitle(title)
    # one legend below the panels, where it covers no point
    handles = max((ax.get_legend_handles_labels() for ax in axes), key=lambda h: len(h[0]))
    fig.legend(*handles, loc="lower center", ncol=3, bbox_to_anchor=(0.5, 0.07), frameon=False)
    fig.text(0.5, 0.02, SIGN, ha="center", va="bottom", fontsize="small")
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    if path is not None:
        fig.savefig(path)
    return fig
