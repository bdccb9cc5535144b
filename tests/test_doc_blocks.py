"""Every code block of the README and the docs pages runs here, or says on the line before it
why not (`<!-- not run: REASON -->`, naming the test that runs the same command where one
does). The Python blocks of a page run in order in one namespace, on tiny data."""
import inspect
import re

import numpy as np
import pytest
from conftest import ROOT

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
MARK = re.compile(r"<!-- not run: (.+?) -->\s*\Z", re.S)
TEST_REF = re.compile(r"tests/(\w+\.py)(?:::(\w+))?")
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in [ROOT / "README.md",
                                                        *(ROOT / "docs").rglob("*.md")])


def blocks(page):
    """[(language, code, reason or None)] of a page, in order."""
    text = (ROOT / page).read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before + "\n")
        found.append((m.group(1), m.group(2), mark.group(1) if mark else None))
    if page == "README.md":  # its two commands: tests/test_docs.py and CI itself run them
        assert found[0][1].count("\n") == 2 and "pytest" in found[0][1]
        found[0] = (found[0][0], found[0][1], "tests/test_docs.py::test_ci_runs_the_readme_test_"
                    "command, tests/test_examples.py::test_digits_under_the_launcher_reaches_95_"
                    "percent")
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs_or_says_why_not(page):
    for language, code, reason in blocks(page):
        where = f"{page}: the block starting {code.splitlines()[0]!r}"
        if reason is None:
            assert language == "python", f"{where}: run it (python) or mark it not run, and why"
            continue
        for name, test in TEST_REF.findall(reason):
            source = (ROOT / "tests" / name).read_text()  # a missing file fails here
            assert not test or f"def {test}(" in source, f"{where}: no test {name}::{test}"
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
    for language, code, reason in blocks(page):
        if reason is None:
            exec(compile(code, f"{page} block {ran}", "exec"), namespace)
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
    layout = next(code for _, code, reason in blocks("docs/fit.md")
                  if reason and "directory layout" in reason)
    newest = max((tmp_path / "ckpt").glob("ckpt-*"))
    written = {p.name for p in newest.iterdir()}
    assert {"net.params", "trainer.states", "state.json"} <= written
    assert all(re.search(rf"^\s+{re.escape(name)}\s", layout, re.M) for name in written)
    assert re.search(r"ckpt-\d{6}/", layout) and re.fullmatch(r"ckpt-\d{6}", newest.name)


def test_the_signature_on_the_fit_page_is_fits():
    from gluondist.training.loop import fit
    code = next(code for _, code, reason in blocks("docs/fit.md")
                if reason and "the signature" in reason)
    shown = re.sub(r"\s+", " ", code.strip())
    params = ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}"
                       for p in inspect.signature(fit).parameters.values())
    assert shown == f"gluondist.fit({params})"
