"""The docs' shell commands that start jobs, run as they are (tests/docpages.py reads each from
its page): in a directory holding what the page says it holds, with this environment's
`gluondist` and `python` first on PATH."""
import re

import pytest

import docpages

pytestmark = pytest.mark.slow


def test_the_own_loop_page_runs_as_a_job(tmp_path):
    loop = next(b.code for b in docpages.blocks("docs/own-loop.md") if b.language == "python")
    (tmp_path / "train_loop.py").write_text(loop)
    [command] = docpages.commands(docpages.block("docs/own-loop.md", "gluondist launch"))
    code, out, err, _ = docpages.shell(command, tmp_path)
    assert code == 0, err
    losses = [float(v) for v in re.findall(r"^\[worker 0\] epoch \d: loss ([\d.]+)$", out, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2, out
    assert "[worker 1] epoch" not in out  # rank 0 alone prints
