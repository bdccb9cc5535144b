"""The docs pages' Python blocks run in a fresh interpreter each, as a reader would paste
them (nothing predefined): every page, the first fit as it stands, the fit, callbacks,
checkpoint and own-loop pages with a probe of what they claim."""
import ast
import json
import re
import subprocess
import sys

import pytest
import docpages
from docpages import PAGES, blocks, marked


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


FIT_PROBE = """
import numpy as np
result = {"logits": list(logits.shape), "probs": list(probs.shape),
          "probs_sum_1": bool(np.allclose(probs.sum(axis=1), 1, atol=1e-5)),
          "logits_sum_1": bool(np.allclose(logits.sum(axis=1), 1, atol=1e-2))}
"""


OWN_LOOP_PROBE = """
result = {"losses": losses, "resumed": resumed, "newest": str(checkpoint.load_latest("loop-ckpt").path)}
"""


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p) and p not in OWN_TESTS])
def test_a_pages_python_blocks_run_in_a_fresh_interpreter(page, tmp_path):
    """What a reader gets who runs the page's snippets in order in a new Python: no NameError,
    nothing defined by a test. The pages in OWN_TESTS are run so below, with checks of their own."""
    assert run_fresh(page, tmp_path)[0] >= 1


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


def test_the_fit_pages_blocks_run(tmp_path):
    ran, result, _ = run_fresh("docs/fit.md", tmp_path, FIT_PROBE)
    assert ran == 4  # the set-up, evaluate and predict, accumulation, sample weights
    assert result["logits"] == result["probs"] == [16, 10]
    assert result["probs_sum_1"]  # what predict gave: not
    assert not result["logits_sum_1"]  # probabilities


def test_the_callbacks_page_names_the_history_keys_fit_records(tmp_path):
    probe = "import math\nresult = [keys, all(map(math.isfinite, sum(history.history.values(), [])))]"
    ran, (keys, finite), _ = run_fresh("docs/fit-callbacks.md", tmp_path, probe)
    assert ran == 2 and finite  # every figure it shows is a number
    code = docpages.block("docs/fit-callbacks.md", "history = gluondist.fit(net, train, val_data")
    shown = ast.literal_eval("".join(re.findall(r"^#\s?(.*)$", code, re.M)))
    assert keys == shown


def test_the_fit_checkpoint_pages_blocks_run(tmp_path):
    ran, _, said = run_fresh("docs/fit-checkpoints.md", tmp_path)
    assert ran == 3  # the set-up, the checkpoints, the best weights
    assert (tmp_path / "best.params").is_file()
    assert "fit: resuming from run-ckpt after epoch 2 of 3 (resume=False starts over)" in said
    # the checkpoint layout the page draws: the files of the newest checkpoint are named there
    layout = next(b.code for b in blocks("docs/fit-checkpoints.md")
                  if b.reason and "directory layout" in b.reason)
    newest = max((tmp_path / "run-ckpt").glob("ckpt-*"))
    written = {p.name for p in newest.iterdir()}
    assert {"net.params", "trainer.states", "state.json"} <= written
    assert all(re.search(rf"^\s+{re.escape(name)}\s", layout, re.M) for name in written)
    assert re.search(r"ckpt-\d{6}/", layout) and re.fullmatch(r"ckpt-\d{6}", newest.name)


def test_the_own_loop_page_trains_and_resumes_in_one_process(tmp_path):
    ran, result, _ = run_fresh("docs/own-loop.md", tmp_path, OWN_LOOP_PROBE)
    assert ran == 2
    losses = result["losses"]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2
    # the checkpoint section: 2 epochs, then a second call that resumes after them to 4
    assert result["resumed"] == [0, 2]
    assert result["newest"].endswith("ckpt-000003")  # numbered from 0


LONG_JOBS_PROBE = """
from mxnet import nd
equal = lambda x, y: all((p.data().asnumpy() == q.data().asnumpy()).all()
                         for p, q in zip(x.collect_params().values(), y.collect_params().values()))
result = {"fit": bool(same), "loop": [resumed == uninterrupted, equal(a, b)]}
"""


def test_the_long_jobs_page_resumes_bit_equal_as_it_prints(tmp_path):
    """What the page prints is True: fit's resume and the hand-written loop's, bit-equal."""
    ran, result, said = run_fresh("docs/long-jobs.md", tmp_path, LONG_JOBS_PROBE)
    assert ran == 2
    assert result == {"fit": True, "loop": [True, True]}
    assert "fit: resuming from long-ckpt in epoch 2 of 3, after its batch 13 of 57" in said
