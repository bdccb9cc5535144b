"""The examples run as they are: the README's main job and its first fit. The two corrected
recipes run as Getting started shows them, in e2e/test_doc_commands.py."""
import re
import subprocess
import sys

from conftest import ROOT

EXAMPLES = ROOT / "examples"


def test_digits_under_the_launcher_reaches_95_percent(launch, tmp_path):
    job = launch("-n", 2, "-s", 1, EXAMPLES / "digits.py", "--plot", tmp_path / "curves.png")
    assert job.wait(timeout=300) == 0, job.err
    accuracy = float(re.search(r"\[worker 0\] final validation accuracy: ([\d.]+)",
                               job.out).group(1))
    assert accuracy >= 0.95
    assert "[worker 1] final" not in job.out  # only rank 0 reports and plots
    # fit's line per epoch, from worker 0 only (the job's figures, agreed by every worker)
    # (once: through the bootstrap's logging, not printed as well)
    assert len(re.findall(r"^\[worker 0\] epoch 15/15: loss=[\d.]+ ", job.out, re.M)) == 1
    assert "[worker 1] epoch" not in job.out
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert job.leftovers() == []


def run_example(name, *args, cwd=None):
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_readmes_first_fit_runs_and_run_again_says_it_resumed_a_finished_run(tmp_path):
    first = run_example("first_fit.py", cwd=tmp_path)
    accuracy = float(re.fullmatch(r"validation accuracy: ([\d.]+)\n", first.stdout).group(1))
    assert accuracy >= 0.95 and (tmp_path / "curves.png").stat().st_size > 0
    # no terminal: a line per epoch on stderr, as the README says
    assert re.findall(r"^epoch (\d+)/15: ", first.stderr, re.M) == [str(e) for e in range(1, 16)]
    again = run_example("first_fit.py", cwd=tmp_path)  # the same: ckpt/ holds the finished run
    assert again.stdout == first.stdout and "epoch 1/15" not in again.stderr
    assert again.stderr.strip() == (
        "fit: the run in ckpt had already trained 15 epoch(s) (epochs=15): nothing to train; "
        "raise epochs to train on, or pass resume=False to start over")


def test_digits_with_no_epochs_trains_nothing_and_says_so(tmp_path):
    proc = run_example("digits.py", "--epochs", 0, "--plot", tmp_path / "curves.png")
    assert proc.stdout == "" and not (tmp_path / "curves.png").exists()
    assert proc.stderr.strip() == "fit: epochs=0: nothing to train (the History returned is empty)"


def test_resnet_under_the_launcher_reaches_its_saved_accuracy(launch):
    """examples/resnet.py at its defaults, as benchmarks/results/resnet_example.txt saved it
    (docs/models.md quotes that figure): a 2-worker job trains the same digits alike."""
    job = launch("-n", 2, "-s", 1, EXAMPLES / "resnet.py")
    assert job.wait(timeout=400) == 0, job.err
    final = r"\[worker 0\] final validation accuracy: ([\d.]+)"
    saved = (ROOT / "benchmarks" / "results" / "resnet_example.txt").read_text()
    assert float(re.search(final, job.out).group(1)) >= float(re.search(final, saved).group(1)) \
        - 0.01 >= 0.98
    assert job.leftovers() == []
