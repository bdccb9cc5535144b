"""fit(checkpoint_every=N) in real jobs: a worker killed mid-epoch, a process killed while
its thread writes a step checkpoint (the in-process tests: training/test_step_checkpoints.py)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from gluondist import checkpoint

from conftest import SCRIPTS, job_results, kill_during_a_write

SCRIPT = str(SCRIPTS / "fit_job.py")


@pytest.mark.parametrize("net", [None, "convbn", "convbn sync"])
def test_a_worker_killed_mid_epoch_resumes_from_the_step_checkpoint_bit_equal(launch, tmp_path,
                                                                              net):
    """129 samples in global batches of 16: 9 batches an epoch, a checkpoint every 2 updates
    of the run (after batches 2, 4, 6, 8 of epoch 1, then 1, 3, 5, 7 of epoch 2). Worker 1
    is killed after batch 5 of epoch 2, before that batch's checkpoint: the job resumes after
    batch 3, with at most 2 batches trained again. The MLP, and a Conv2D + BatchNorm net
    (tests/models.py), whose running statistics must resume bit-equal too, with its
    BatchNorm also summed over the job (sync_batchnorm; 130 samples, so that the last batch
    gives each worker one)."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir(), cut.mkdir()
    opts = {"every": 2}  # SGD with momentum
    if net:
        opts.update(net="convbn")
    if net == "convbn sync":
        opts.update(sync_batchnorm=True, samples=130)
    job = launch("-n", 2, "-s", 1, SCRIPT, whole, 3, 8,
                 json.dumps({**opts, "ckpt": str(whole / "ckpt")}))
    assert job.wait(timeout=300) == 0, job.err
    killed = launch("-n", 2, "-s", 1, "--max-restarts", 1, SCRIPT, cut, 3, 8,
                    json.dumps({**opts, "ckpt": str(cut / "ckpt"), "kill_at": [1, 4]}))
    assert killed.wait(timeout=300) == 0, killed.err
    assert "worker 1 failed first: killed by SIGKILL" in killed.err
    assert "succeeded after 1 restart(s)" in killed.err
    said = f"fit: resuming from {cut / 'ckpt'} in epoch 2 of 3, after its batch 3 of 9"
    assert f"[worker 0] {said}" in killed.out
    (w0, w1), (hw, _) = job_results(whole, 2)
    (c0, c1), (hc, _) = job_results(cut, 2)
    for key in w0:
        assert np.array_equal(w0[key], c0[key]) and np.array_equal(c0[key], c1[key]), key
    assert {k: v for k, v in hw.items() if "second" not in k and "per_s" not in k} == \
        {k: v for k, v in hc.items() if "second" not in k and "per_s" not in k}
    assert job.leftovers() == [] and killed.leftovers() == []


def test_a_kill_during_a_step_checkpoints_write_keeps_the_one_before(tmp_path):
    """The writer thread hangs halfway through the second step checkpoint (after batch 8 of
    epoch 1, every 4 updates); kill -9 then. The first step checkpoint is whole and resumed."""
    ckpt = tmp_path / "ckpt"
    kill_during_a_write(ckpt, tmp_path / "writing", "4")
    latest = checkpoint.load_latest(ckpt)
    assert (latest.epoch, latest.batch) == (0, 4)
    done = subprocess.run([sys.executable, str(SCRIPTS / "checkpoint_hang.py"), str(ckpt),
                           str(tmp_path / "never"), "4", "resume"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"fit: resuming from {ckpt} in epoch 1 of 3, after its batch 4 of 13" in done.stderr
    whole = subprocess.run([sys.executable, str(SCRIPTS / "checkpoint_hang.py"),
                            str(tmp_path / "whole"), str(tmp_path / "never"), "4", "resume"],
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr
    a, b = (dict(np.load(d / "params.npz")) for d in (ckpt, tmp_path / "whole"))
    assert all(np.array_equal(a[k], b[k]) for k in a)
