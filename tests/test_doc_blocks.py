"""Every code block of the README, CONTRIBUTING.md and the docs pages runs: the Python blocks
of a page here, in order, in one namespace; any other block in the test its marker names, which
reads the block from the page and runs it as it is (`<!-- run by: tests/x.py::test_y -->`), or
the line before it says why none does (`<!-- not run: REASON -->`; see tests/docpages.py)."""
import ast
import inspect
import re

import numpy as np
import pytest
from conftest import ROOT
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


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_front_pages_fit_runs(page, data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = dict(data)
    assert run_page(page, namespace) == 1
    assert len(namespace["history"].history["val_accuracy"]) == 15
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_the_fit_pages_blocks_run(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = dict(data)
    assert run_page("docs/fit.md", namespace) == 5
    assert namespace["probs"].shape == (16, 10)
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
