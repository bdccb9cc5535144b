"""The docs site builds with mkdocs --strict (every link and API name checked), and the
plots are drawn by the command the docs give."""
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, load_file


def hooks():
    return load_file("docs_hooks", ROOT / "docs" / "hooks.py")


def test_the_site_builds_strict_with_every_link_and_name_checked(tmp_path):
    # strict: true in mkdocs.yml, and --strict here: any warning (a broken link or anchor, a
    # name docs/hooks.py cannot find, a docstring mkdocstrings cannot render) fails the build
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "gluondist bench kvstore" in cli and "--stall-timeout" in cli and "--plot" in cli
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "clip_global_norm" in api and "restore_best_weights" in api  # the docstrings


def test_the_plots_are_drawn_by_the_command(tmp_path):
    pytest.importorskip("matplotlib")
    plots = load_file("plots", ROOT / "benchmarks" / "plots.py")
    plots.main(["--out", str(tmp_path)])  # from benchmarks/results/, and docs/index.md's fit
    drawn = sorted(p.name for p in tmp_path.iterdir())
    assert drawn == ["compression_accuracy.png", "fit_vs_hand.png", "kvstore.png",
                     "learning_curve.png", "links.png", "models.png", "peers.png", "workers.png"]
    measured = (ROOT / "docs" / "measured.md").read_text()
    assert sorted(re.findall(r"\]\(img/(\w+\.png)\)", measured)) == drawn
    assert all((ROOT / "docs" / "img" / name).is_file() for name in drawn)
    # one run per page: the table is generated from the result the kvstore plot is drawn from
    assert hooks().BENCH_MARK.findall(measured) == ["benchmarks/results/kvstore_w2.json"]
    assert '"kvstore_w2.json"' in (ROOT / "benchmarks" / "plots.py").read_text()
    assert hooks().WORKERS_MARK.findall(measured) == ["benchmarks/results/workers.json"]
    assert '"workers.json"' in (ROOT / "benchmarks" / "plots.py").read_text()
    assert hooks().ACCURACY_MARK.findall(measured) == [
        "benchmarks/results/compression_accuracy.json"]
    assert '"compression_accuracy.json"' in (ROOT / "benchmarks" / "plots.py").read_text()
    assert "benchmarks/results/peers.json" in measured  # the peers and links plots' run
    assert '"peers.json"' in (ROOT / "benchmarks" / "plots.py").read_text()
    for run in plots.MODEL_RUNS:  # the models plot's runs, each named on the page
        assert f"benchmarks/results/{run}" in measured or run in measured, run
