"""A worker's exit after its script finished, through the bootstrap (issue 28, point 7).

A closure left in a long-lived module kept the kvstore alive past Python's shutdown, so MXNet
never passed its exit barrier and ps-lite's static destructor aborted the worker (exit 134)
after training ended. Each job here is a real 2-worker fit under the launcher."""
import json
import uuid

import numpy as np
import pytest

from conftest import SCRIPTS, TAG, kill_tagged


@pytest.mark.parametrize("kind", ["excepthook", "fsync"])
def test_a_closure_left_in_a_long_lived_module_still_ends_the_job_cleanly(kind, tmp_path,
                                                                         monkeypatch):
    import gluondist

    tag = uuid.uuid4().hex
    monkeypatch.chdir(tmp_path)
    try:
        result = gluondist.launch(str(SCRIPTS / "closure_job.py"), kind, num_workers=2,
                                  num_servers=1, env={TAG: tag}, echo=False)
    finally:
        stray = kill_tagged(tag)
    logs = "\n".join(f"[{label}] {line}" for label, lines in result.logs.items()
                     for line in lines)
    assert "terminate called" not in logs
    assert result.exit_code == 0, logs
    # the servers and scheduler ended by themselves: the workers passed MXNet's exit barrier
    assert result.stopped == (), logs
    params = [np.load(tmp_path / f"params.{rank}.npz") for rank in (0, 1)]
    assert sorted(params[0]) == sorted(params[1])
    assert all(np.array_equal(params[0][k], params[1][k]) for k in params[0])  # dist_sync
    for rank in (0, 1):
        history = json.loads((tmp_path / f"history.{rank}.json").read_text())
        assert len(history["loss"]) == 2 and all(np.isfinite(history["loss"]))
        assert (tmp_path / f"atexit.{rank}").read_text() == "ran"  # the script's handler
        assert (tmp_path / f"thread.{rank}").read_text() == "joined"  # its thread waited for
        assert (tmp_path / f"buffered.{rank}").read_text() == "buffered"  # its open file
    assert stray == []


def test_a_loop_that_ends_right_after_its_last_step_exits(launch, tmp_path):
    """Issue 36, defect 11: the last step's push and pull were still in MXNet's engine when
    the script returned, and MXNet's shutdown hook waited for them forever (3 of 3 runs; with
    ``mx.nd.waitall()`` at the script's end, 3 of 3 exited 0). The stall timeout bounds the
    old hang: exit 124."""
    job = launch("-n", "2", "-s", "1", "--stall-timeout", "20", SCRIPTS / "last_step_job.py")
    code = job.wait(timeout=150)
    assert code == 0, job.out + job.err
    assert sorted(p.name for p in tmp_path.glob("done.*")) == ["done.0", "done.1"]
    assert job.leftovers() == []
