"""What fit shows in a script run without a terminal: a line per epoch on stderr, and one
line when it resumes (the in-process cases: training/test_fit_console.py)."""
import re
import subprocess
import sys

from conftest import SCRIPTS

LINE = r"epoch {}/{}: loss=\d+\.\d{{4}}  accuracy=\d\.\d{{4}}  \d+\.\d\ds \d+ samples/s"


def test_a_script_without_a_terminal_shows_each_epoch_on_stderr_and_says_it_resumed(tmp_path):
    ckpt = tmp_path / "ckpt"  # the same call twice, the second with one epoch more: a resume
    proc = subprocess.run([sys.executable, str(SCRIPTS / "fit_said.py"), str(ckpt), "2", "3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # stdout holds the script's own results only
    assert proc.stdout == "history: 2 epoch(s)\nhistory: 3 epoch(s)\n"
    err = proc.stderr.splitlines()
    assert len(err) == 4, err
    assert re.fullmatch(LINE.format(1, 2), err[0]) and re.fullmatch(LINE.format(2, 2), err[1])
    assert err[2] == f"fit: resuming from {ckpt} after epoch 2 of 3 (resume=False starts over)"
    assert re.fullmatch(LINE.format(3, 3), err[3]), err
