"""Every code block of the README, CONTRIBUTING.md and the docs pages runs: the Python blocks
of a page here, in order, in one namespace of a fresh interpreter (a subprocess per page,
nothing predefined); any other block in the test its marker names, which
reads the block from the page and runs it as it is (`<!-- run by: tests/x.py::test_y -->`), or
the line before it says why none does (`<!-- not run: REASON -->`; see tests/docpages.py)."""
import ast
import inspect
import json
import re
import shlex
import subprocess
import sys

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


# Run in a fresh interpreter: the page's blocks in order, in one namespace that starts empty
# (nothing from this process or a fixture), then the test's probe, whose `result` comes back.
RUNNER = """
import json, sys
given = json.load(sys.stdin)
namespace = {"__name__": "__main__"}
for i, code in enumerate(given["blocks"]):
    exec(compile(code, given["page"] + " block " + str(i), "exec"), namespace)
exec(compile(given["probe"], "the test's probe", "exec"), namespace)
print("\\n" + given["mark"] + json.dumps(namespace.get("result")))
"""
RESULT = "doc-blocks-result: "


def python_blocks(page):
    return [b.code for b in marked(page) if b.mark is None]


def run_fresh(page, cwd, probe="", timeout=600):
    """``page``'s Python blocks run in order by a new interpreter in ``cwd``, then ``probe``
    (which may set ``result``, JSON); returns (blocks run, result, stderr)."""
    code = python_blocks(page)
    proc = subprocess.run([sys.executable, "-c", RUNNER], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, input=json.dumps(
                              {"page": page, "blocks": code, "probe": probe, "mark": RESULT}))
    assert proc.returncode == 0, f"{page}'s blocks, in a fresh interpreter:\n{proc.stderr}"
    result = proc.stdout.rsplit(RESULT, 1)[1]
    return len(code), json.loads(result), proc.stderr


OWN_TESTS = ("docs/index.md", "docs/fit.md", "docs/fit-callbacks.md", "docs/fit-checkpoints.md",
             "docs/own-loop.md")


@pytest.mark.slow  # seconds of CPU in a process of its own, per page
@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p) and p not in OWN_TESTS])
def test_a_pages_python_blocks_run_in_a_fresh_interpreter(page, tmp_path):
    """What a reader gets who runs the page's snippets in order in a new Python: no NameError,
    nothing defined by a test. The pages in OWN_TESTS are run so below, with checks of their own."""
    assert run_fresh(page, tmp_path)[0] >= 1


@pytest.mark.slow  # seconds of CPU in a process of its own
def test_the_first_fit_runs_as_it_stands(tmp_path):
    """Getting started's fit loads its own data (in a fresh interpreter), and run again it says
    what the page says: the finished run in ckpt, nothing to train."""
    probe = ("result = {'accuracy': history.history['val_accuracy']}")
    ran, result, err = run_fresh("docs/index.md", tmp_path, probe)
    assert ran == 1
    accuracy = result["accuracy"]
    assert len(accuracy) == 15 and accuracy[-1] > 0.9
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert err.count("val_accuracy") == 15  # a line per epoch, no terminal
    ran, _, said = run_fresh("docs/index.md", tmp_path)
    assert ran == 1
    assert "fit: the run in ckpt had already trained 15 epoch(s)" in said
    assert "nothing to train" in said and "resume=False to start over" in said


FIT_PROBE = """
import numpy as np
result = {"logits": list(logits.shape), "probs": list(probs.shape),
          "probs_sum_1": bool(np.allclose(probs.sum(axis=1), 1, atol=1e-5)),
          "logits_sum_1": bool(np.allclose(logits.sum(axis=1), 1, atol=1e-2))}
"""


@pytest.mark.slow  # seconds of CPU in a process of its own
def test_the_fit_pages_blocks_run(tmp_path):
    ran, result, _ = run_fresh("docs/fit.md", tmp_path, FIT_PROBE)
    assert ran == 4  # the set-up, evaluate and predict, accumulation, sample weights
    assert result["logits"] == result["probs"] == [16, 10]
    assert result["probs_sum_1"]  # what predict gave: not
    assert not result["logits_sum_1"]  # probabilities


@pytest.mark.slow  # seconds of CPU in a process of its own
def test_the_callbacks_page_names_the_history_keys_fit_records(tmp_path):
    ran, keys, _ = run_fresh("docs/fit-callbacks.md", tmp_path, "result = keys")
    assert ran == 2
    code = docpages.block("docs/fit-callbacks.md", "history = gluondist.fit(net, train, val_data")
    shown = ast.literal_eval("".join(re.findall(r"^#\s?(.*)$", code, re.M)))
    assert keys == shown


@pytest.mark.slow  # seconds of CPU in a process of its own
def test_the_fit_checkpoint_pages_blocks_run(tmp_path):
    ran, _, said = run_fresh("docs/fit-checkpoints.md", tmp_path)
    assert ran == 3  # the set-up, the checkpoints, the best weights
    assert (tmp_path / "best.params").is_file()
    assert "fit: resuming from ckpt after epoch 2 of 3 (resume=False starts over)" in said
    # the checkpoint layout the page draws: the files of the newest checkpoint are named there
    layout = next(b.code for b in blocks("docs/fit-checkpoints.md")
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


OWN_LOOP_PROBE = """
result = {"losses": losses, "resumed": resumed, "newest": str(checkpoint.load_latest("loop-ckpt").path)}
"""


@pytest.mark.slow  # seconds of CPU in a process of its own
def test_the_own_loop_page_trains_and_resumes_in_one_process(tmp_path):
    ran, result, _ = run_fresh("docs/own-loop.md", tmp_path, OWN_LOOP_PROBE)
    assert ran == 2
    losses = result["losses"]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2
    # the checkpoint section: 2 epochs, then a second call that resumes after them to 4
    assert result["resumed"] == [0, 2]
    assert result["newest"].endswith("ckpt-000003")  # numbered from 0


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
