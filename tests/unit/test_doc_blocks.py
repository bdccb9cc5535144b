"""Every code block of the README, CONTRIBUTING.md and the docs pages is run by a test or
says why not (the Python blocks run in e2e/test_doc_pages_run.py); the fit signature on
its page is fit's (the sample hostfile's command: launcher/test_doc_hostfile.py)."""
import ast
import inspect
import re

import pytest
from conftest import ROOT
from docpages import PAGES, TEST_REF, FENCE, blocks, marked


def function_source(name: str, test: str) -> str:
    tree = ast.parse((ROOT / "tests" / name).read_text())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test]
    assert found, f"no test {name}::{test}"
    return ast.get_source_segment((ROOT / "tests" / name).read_text(), found[0])


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


def test_the_signature_on_the_fit_page_is_fits():
    from gluondist.training.loop import fit
    code = next(b.code for b in blocks("docs/fit.md")
                if b.reason and "the signature" in b.reason)
    shown = re.sub(r"\s+", " ", code.strip())
    params = ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}"
                       for p in inspect.signature(fit).parameters.values())
    assert shown == f"gluondist.fit({params})"


