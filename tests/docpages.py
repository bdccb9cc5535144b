"""The code blocks of the README, CONTRIBUTING.md and the docs pages, as the tests read them.

A block is run by tests/e2e/test_doc_pages_run.py (Python, in order, in one namespace of a fresh
interpreter, a subprocess per page), or the line before it says which test runs it or why none
does:

    <!-- run by: tests/TIER/test_x.py::test_y -->   that test reads this very block with block()
                                               and runs it as it is (test_doc_blocks checks
                                               that the test exists and reads this page)
    <!-- not run: REASON -->                   not a command (a layout, a formula), or one that
                                               needs what no test has; REASON names the test
                                               that runs its exact form, where one does
"""
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import List, Optional

from conftest import ROOT, TAG, kill_tagged

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
MARK = re.compile(r"<!-- (not run|run by): (.+?) -->\s*\Z", re.S)
TEST_REF = re.compile(r"tests/((?:\w+/)?\w+\.py)(?:::(\w+))?")
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in [
    ROOT / "README.md", *ROOT.glob("CONTRIBUTING.md"), *(ROOT / "docs").rglob("*.md")])


@dataclass(frozen=True)
class Block:
    page: str
    language: str
    code: str
    mark: Optional[str]  # "not run", "run by" or None (run by test_doc_pages_run)
    reason: Optional[str]

    @property
    def where(self) -> str:
        return f"{self.page}: the block starting {self.code.splitlines()[0]!r}"


def blocks(page: str) -> List[Block]:
    """Every fenced block of ``page`` (a path from the repository's root), in order."""
    text = (ROOT / page).read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before + "\n")
        found.append(Block(page, m.group(1), m.group(2), mark and mark.group(1),
                           mark and mark.group(2)))
    return found


def block(page: str, first: str) -> str:
    """The code of the one block of ``page`` whose first line starts with ``first``."""
    found = [b.code for b in blocks(page) if b.code.startswith(first)]
    assert len(found) == 1, f"{page}: {len(found)} blocks start with {first!r}"
    return found[0]


def commands(code: str) -> List[str]:
    """A shell block's commands, one per line (a trailing backslash continues a line),
    comments dropped."""
    joined = re.sub(r"\\\n\s*", "", code)
    return [re.sub(r"\s+#\s.*$", "", line).strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def shell(command: str, cwd, timeout: float = 300, env=None):
    """Run ``command`` as it is, through bash, as a user of this virtual environment types it
    (its ``gluondist`` and ``python`` first on PATH), tagged (conftest.TAG) so that every
    process it starts can be found; returns (exit code, stdout, stderr, tag). Whatever is left
    of it is killed before this returns."""
    tag = uuid.uuid4().hex
    full = {**venv_env(), **(env or {}), TAG: tag}
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=full, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{command!r} still running after {timeout}s") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        stray = kill_tagged(tag)
    assert not stray, f"processes of {command!r} outlived it: {stray}"
    return proc.returncode, out, err, tag


def venv_env() -> dict:
    """This environment as a user who activated this virtual environment has it."""
    return {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}


def marked(page):
    """The page's blocks; the README's two commands are run by CI itself (.ci/run) and by the
    example's test, which tests/unit/test_docs.py keeps the same."""
    found = blocks(page)
    if page == "README.md":
        assert found[0].code.count("\n") == 2 and "pytest" in found[0].code
        found[0] = found[0].__class__(page, found[0].language, found[0].code, "not run", (
            "tests/unit/test_docs.py::test_ci_runs_the_readme_test_command, "
            "tests/e2e/test_examples.py::test_digits_under_the_launcher_reaches_95_percent"))
    return found
