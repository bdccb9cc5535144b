"""The examples run as they are: the README's main job, and the two corrected recipes."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow
EXAMPLES = ROOT / "examples"


def test_digits_under_the_launcher_reaches_95_percent(launch, tmp_path):
    job = launch("-n", 2, "-s", 1, EXAMPLES / "digits.py", "--plot", tmp_path / "curves.png")
    assert job.wait(timeout=300) == 0, job.err
    accuracy = float(re.search(r"\[worker 0\] final validation accuracy: ([\d.]+)",
                               job.out).group(1))
    assert accuracy >= 0.95
    assert "[worker 1] final" not in job.out  # only rank 0 reports and plots
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert job.leftovers() == []


def test_parameter_server_recipe_under_the_launcher(launch):
    job = launch("-n", 2, "-s", 1, EXAMPLES / "parameter_server.py")
    assert job.wait(timeout=300) == 0, job.err
    for rank in (0, 1):
        losses = re.search(rf"\[worker {rank}\] worker {rank} of 2: loss per epoch ([\d. ]+)",
                           job.out).group(1).split()
        assert float(losses[-1]) < float(losses[0]) / 2


def test_data_parallel_recipe_runs_as_it_is():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "data_parallel.py")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    losses = proc.stdout.split("loss per epoch")[1].split()
    assert "2 devices" in proc.stdout and float(losses[-1]) < float(losses[0]) / 2
