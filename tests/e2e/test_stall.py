"""--stall-timeout: a real 2-worker job in which one worker stops making progress. What does
not depend on MXNet (heartbeats, CPU time, a slow start) is tested
fast, in launcher/test_control_loop.py."""
import re
import time

from conftest import SCRIPTS, wait_until

STALL = str(SCRIPTS / "stall_job.py")


def stalled_for(err):
    return int(re.search(r"no worker made progress for (\d+)s", err).group(1))


def stuck_seconds(tmp_path, job, timeout):
    """How long after the stuck worker stopped the launcher exited."""
    wait_until(lambda: list(tmp_path.glob("*.stuck")) or job.proc.poll() is not None,
               timeout=120, message="a worker to get stuck")
    stuck_at = time.monotonic()
    code = job.wait(timeout=timeout + 60)
    return code, time.monotonic() - stuck_at


def test_a_worker_that_stops_is_found_with_its_stack(launch, tmp_path):
    # 4 s: every worker beats after each step of 10 ms, so no healthy gap comes near it
    job = launch("-n", 2, "-s", 1, "--stall-timeout", 4, STALL, "beat", 1)
    code, took = stuck_seconds(tmp_path, job, 4)
    assert code == 124, job.err
    # detected within the timeout plus a few seconds: the launcher's own account, and the
    # wall time from the stuck moment to its exit (stacks and teardown included; generous for
    # a loaded machine)
    assert stalled_for(job.err) <= 4 + 2, job.err
    assert took < 4 + 15, took
    assert "(--stall-timeout 4)" in job.err
    assert "exit code 124 (stalled)" in job.err
    # its frame, from the stack the bootstrap dumped on request
    stack = job.err.split("worker 1's stack")[1].split("gluondist:")[0]
    assert "in stuck_forever" in stack and "stall_job.py" in stack, job.err
    assert "bootstrap.py" not in stack and "runpy" not in stack, job.err  # ours: left out
    assert "worker 0's stack" in job.err
    assert "20 batches" in job.err
    assert not list(tmp_path.glob("*.done"))
    assert job.leftovers() == []


def test_fit_reports_progress_and_a_stuck_fit_restarts(launch, tmp_path):
    # a stall is restarted like any failure: one line for the attempt, no exit code of its own.
    # 5 s: fit beats after each batch, and before the first one its CPU time counts
    job = launch("-n", 2, "-s", 1, "--stall-timeout", 5, "--max-restarts", 1,
                 SCRIPTS / "fit_stall.py")
    assert job.wait(timeout=300) == 0, job.err
    first = job.err.split("restarting the job")[0]
    assert "gluondist: attempt 1 failed: the job stalled" in first
    assert "gluondist: restarting the job (1 of 1)" in job.err
    assert "exit code" not in first and "succeeded after 1 restart(s)" in job.err
    assert "8 batches" in first  # fit's heartbeat: 256 samples / (2 x 16) per epoch
    assert "in on_epoch_begin" in first.split("worker 1's stack")[1]
    assert {p.name for p in tmp_path.glob("*.done")} == {"0.done", "1.done"}
    assert job.leftovers() == []
