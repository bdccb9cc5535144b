"""benchmarks/pipeline.py and pipeline_overlap.py: the docs' table and figures are the saved
results', the plot draws from them, and the overlap arithmetic on a literal trace."""
import json

import pytest

from conftest import ROOT, load_file

RESULTS = ROOT / "benchmarks" / "results"


def module(name):
    return load_file(name, ROOT / "benchmarks" / f"{name}.py")


def test_the_pages_table_is_the_saved_run():
    bench = module("pipeline")
    saved = json.loads((RESULTS / "pipeline.json").read_text())
    assert [r["micro"] for r in saved["rows"]] == [1, 2, 4, 8]
    assert [round(r["model"], 2) for r in saved["rows"]] == [1.0, 1.33, 1.6, 1.78]
    page = (ROOT / "docs" / "pipeline.md").read_text()
    assert bench.markdown(saved) in page
    # memory: the net exceeds one context's budget, and no context holds more than it
    assert saved["total_bytes"] > saved["budget_bytes"] >= max(saved["param_bytes"].values())
    assert sum(saved["param_bytes"].values()) == saved["total_bytes"]


def test_the_plot_draws_from_the_saved_run(tmp_path):
    pytest.importorskip("matplotlib")
    bench = module("pipeline")
    bench.main(["--from", str(RESULTS / "pipeline.json"), "--plot", str(tmp_path / "p.png")])
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
    assert "](img/pipeline.png)" in (ROOT / "docs" / "pipeline.md").read_text()
    assert (ROOT / "docs" / "img" / "pipeline.png").is_file()


def test_overlap_counts_the_time_both_devices_were_busy():
    overlap = module("pipeline_overlap").overlap
    ev = lambda ph, pid, ts, name="op": {"ph": ph, "pid": pid, "tid": 7, "ts": ts, "name": name}
    trace = {"traceEvents": [ev("B", 0, 0), ev("E", 0, 100), ev("B", 0, 50, "x"),
                             ev("E", 0, 150, "x"), ev("B", 1, 120), ev("E", 1, 170),
                             ev("B", 1, 300), ev("E", 1, 320), ev("B", 2, 0), ev("E", 2, 999)]}
    found = overlap(trace)
    assert found["cpu0_busy_ms"] == pytest.approx(0.150)  # 0..150, the two merged
    assert found["cpu1_busy_ms"] == pytest.approx(0.070)
    assert found["both_busy_ms"] == pytest.approx(0.030)  # 120..150
    assert found["overlap"] == pytest.approx(30 / 70)


def test_the_pages_overlap_figures_are_the_saved_run():
    saved = json.loads((RESULTS / "pipeline_overlap.json").read_text())["cases"]
    page = (ROOT / "docs" / "pipeline-engine.md").read_text()
    for name, shown in [("chains", "two independent chains"), ("pipeline", "pipeline       "),
                        ("pipeline, no bulking", "pipeline, no bulking"), ("naive", "naive   ")]:
        row = next(line for line in page.splitlines() if line.startswith(shown))
        assert f"{saved[name]['overlap']:.3f}" in row, name
        if name != "naive":
            assert f"{saved[name]['python_share']:.0%}" in row, name
