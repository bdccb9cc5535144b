"""Every code block of the README, CONTRIBUTING.md and the docs pages runs: the Python blocks
of a page here, in order, in one namespace; any other block in the test its marker names, which
reads the block from the page and runs it as it is (`<!-- run by: tests/x.py::test_y -->`), or
the line before it says why none does (`<!-- not run: REASON -->`; see tests/docpages.py)."""
import ast
import inspect
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
import docpages
from docpages import PAGES, TEST_REF, FENCE, blocks


def function_source(name: str, test: str) -> str:
    tree = ast.parse((ROOT / "tests" / name).read_text())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test]
    assert found, f"no test {name}::{test}"
    return ast.get_source_segment((ROOT / "tests" / name).read_text(), found[0])


def marked(page):
    """The page's blocks; the README's two commands are run by CI itself (.ci/run) and by the
    example's test, which tests/test_docs.py keeps the same."""
    found = blocks(page)
    if page == "README.md":
        assert found[0].code.count("\n") == 2 and "pytest" in found[0].code
        found[0] = found[0].__class__(page, found[0].language, found[0].code, "not run", (
            "tests/test_docs.py::test_ci_runs_the_readme_test_command, tests/test_examples.py::"
            "test_digits_under_the_launcher_reaches_95_percent"))
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs_or_says_why_not(page):
    for b in marked(page):
        if b.mark is None:
            assert b.language == "python", f"{b.where}: run it (python) or mark it, and why"
            continue
        refs = TEST_REF.findall(b.reason)
        for name, test in refs:
            source = (ROOT / "tests" / name).read_text()  # a missing file fails here
            assert not test or f"def {test}(" in source, f"{b.where}: no test {name}::{test}"
        if b.mark == "run by":
            assert len(refs) == 1 and refs[0][1], f"{b.where}: name one test, file::function"
            body = function_source(*refs[0])
            assert f'"{page}"' in body and "docpages." in body, \
                f"{b.where}: {refs[0][0]}::{refs[0][1]} does not read it from {page}"
    text = re.sub(FENCE, "", (ROOT / page).read_text())
    indented = re.findall(r"\n\n( {4,}\S.*)", text)
    assert not indented, f"{page}: an indented code block; fence it: {indented[0]!r}"


@pytest.fixture
def data(digits):
    X, y = digits
    return {"X": X[:64], "y": y[:64], "X_val": X[64:96], "y_val": y[64:96],
            "X_test": X[96:112], "train": (X[:64], y[:64]), "val": (X[64:96], y[64:96]),
            "sample_weight": np.linspace(0.5, 1.5, 64).astype(np.float32)}


def run_page(page, namespace):
    ran = 0
    for b in marked(page):
        if b.mark is None:
            exec(compile(b.code, f"{page} block {ran}", "exec"), namespace)
            ran += 1
    return ran


@pytest.mark.slow  # seconds of CPU in a process of its own
def test_the_first_fit_runs_as_it_stands(tmp_path, monkeypatch, capsys):
    """Getting started's fit loads its own data (nothing given but an empty namespace), and
    run again it says what the page says: the finished run in ckpt, nothing to train."""
    monkeypatch.chdir(tmp_path)
    namespace = {}
    assert run_page("docs/index.md", namespace) == 1
    accuracy = namespace["history"].history["val_accuracy"]
    assert len(accuracy) == 15 and accuracy[-1] > 0.9
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().err.count("val_accuracy") == 15  # a line per epoch, no terminal
    assert run_page("docs/index.md", {}) == 1
    said = capsys.readouterr().err
    assert "fit: the run in ckpt had already trained 15 epoch(s)" in said
    assert "nothing to train" in said and "resume=False to start over" in said


def test_the_fit_pages_blocks_run(data, tmp_path, monkeypatch):
    import mxnet as mx
    from conftest import mlp
    monkeypatch.chdir(tmp_path)
    net = mlp()
    net.initialize(mx.init.Xavier())  # the page continues Getting started's fit: its net
    namespace = dict(data, net=net)
    assert run_page("docs/fit.md", namespace) == 6
    assert namespace["logits"].shape == namespace["probs"].shape == (16, 10)
    assert np.allclose(namespace["probs"].sum(axis=1), 1, atol=1e-5)  # what predict gave: not
    assert not np.allclose(namespace["logits"].sum(axis=1), 1, atol=1e-2)  # probabilities
    assert (tmp_path / "best.params").is_file()
    # the checkpoint layout the page draws: the files of the newest checkpoint are named there
    layout = next(b.code for b in blocks("docs/fit.md")
                  if b.reason and "directory layout" in b.reason)
    newest = max((tmp_path / "ckpt").glob("ckpt-*"))
    written = {p.name for p in newest.iterdir()}
    assert {"net.params", "trainer.states", "state.json"} <= written
    assert all(re.search(rf"^\s+{re.escape(name)}\s", layout, re.M) for name in written)
    assert re.search(r"ckpt-\d{6}/", layout) and re.fullmatch(r"ckpt-\d{6}", newest.name)


def test_the_signature_on_the_fit_page_is_fits():
    from gluondist.training.loop import fit
    code = next(b.code for b in blocks("docs/fit.md")
                if b.reason and "the signature" in b.reason)
    shown = re.sub(r"\s+", " ", code.strip())
    params = ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}"
                       for p in inspect.signature(fit).parameters.values())
    assert shown == f"gluondist.fit({params})"


def test_the_own_loop_page_trains_in_one_process(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    assert run_page("docs/own-loop.md", namespace) == 1
    losses = namespace["losses"]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2


def test_the_sample_hostfile_places_the_job_as_the_page_says(tmp_path):
    """docs/multi-host.md's hostfile and its command, planned (--dry-run: no host is reached):
    the scheduler on node1, the servers one per host, workers 0 and 1 on node2."""
    (tmp_path / "hosts.txt").write_text(docpages.block("docs/multi-host.md", "# hosts.txt"))
    (tmp_path / "train.py").write_text("")
    [command] = docpages.commands(docpages.block("docs/multi-host.md",
                                                 "gluondist launch --launcher ssh -H hosts.txt"))
    args = shlex.split(command)[1:]
    args.insert(args.index("train.py"), "--dry-run")
    proc = subprocess.run([sys.executable, "-m", "gluondist.cli", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    placed = dict(re.findall(r"^(scheduler|server \d|worker \d) on (\S+):", proc.stdout, re.M))
    assert placed == {"scheduler": "node1", "server 0": "node2", "server 1": "node1",
                      "worker 0": "node2", "worker 1": "node2", "worker 2": "node1",
                      "worker 3": "node1"}
