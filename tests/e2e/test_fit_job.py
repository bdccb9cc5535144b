"""The same fit() script in one process and as the workers of a launched job:
equal results, resumes and restarts, dist_async, agreement on stops, NaN and
checkpoints, refused shards of different lengths."""
import json
import time

import numpy as np
import pytest

from conftest import (SCRIPTS, Job, assert_same_history, assert_same_params, job_results,
                      one_process, reap)

SCRIPT = str(SCRIPTS / "fit_job.py")


def resume_like_one_process(launch, tmp_path, ckpt, first):
    """``first`` (a job of 4 epochs x 2 workers x 32) ended early; resuming it from ``ckpt``
    must end as one process of 4 epochs x 64 does."""
    resumed = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 4, 32, json.dumps({"ckpt": str(ckpt)}))
    assert resumed.wait(timeout=300) == 0, resumed.err
    (p0, _), (h0, _) = job_results(tmp_path, 2)
    ref, ref_history = one_process(4, 64)
    assert_same_params(p0, ref, 1e-4)
    assert_same_history(h0, ref_history)
    assert first.leftovers() == [] and resumed.leftovers() == []


RULES_SCRIPT = str(SCRIPTS / "fit_rules_job.py")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A job that two tests assert different things about, run once: ``shared(kvstore, epochs,
    batch, opts)`` runs fit_job.py so and returns (the ended Job, its output directory, the
    pids of it still alive after it ended). Every job is killed and checked at the end."""
    done, jobs = {}, []

    def run(kind, epochs, batch, opts):
        key = (kind, epochs, batch, json.dumps(opts, sort_keys=True))
        if key not in done:
            path = tmp_path_factory.mktemp("job")
            job = Job(["-n", "2", "-s", "1", "--kvstore", kind, SCRIPT, str(path), str(epochs),
                       str(batch), key[3]], path)
            jobs.append(job)
            job.wait(timeout=300)
            done[key] = job, path, job.leftovers()
        return done[key]

    yield run
    reap(jobs)


@pytest.mark.parametrize("opts", [{}, {"clip": 0.3, "schedule": True}])
def test_two_workers_of_32_compute_one_process_of_64(launch, tmp_path, opts):
    job = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 3, 32, json.dumps(opts))
    assert job.wait(timeout=300) == 0, job.err
    (p0, p1), (h0, h1) = job_results(tmp_path, 2)
    assert_same_params(p1, p0)  # every worker ends with the same parameters
    ref, ref_history = one_process(3, 64, opts)
    assert_same_params(p0, ref, 1e-4)
    # metrics, validation included, cover all workers' shares: the same as one process
    assert h0 == h1
    assert_same_history(h0, ref_history)
    assert job.leftovers() == []


def test_two_workers_of_two_stages_compute_one_process_on_one_device(launch, tmp_path):
    """Hybrid parallelism: each worker a pipeline of 4 micro-batches, the servers summing
    across workers; 6 epochs of the digits (a regression once put this job 2.9e-5 from one
    process). Other trainers come first on the same kvstore (several), so the stages' keys
    must be the job's."""
    job = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 6, 64,
                 json.dumps({"pipeline": 4, "several": True, "digits": True}))
    assert job.wait(timeout=300) == 0, job.err
    (p0, p1), (h0, h1) = job_results(tmp_path, 2)
    ref, ref_history = one_process(6, 128, {"digits": True})
    assert_same_params(p1, p0)
    assert_same_params(p0, ref, 1e-5)
    assert h0 == h1
    assert_same_history(h0, ref_history, rtol=1e-5)
    assert job.leftovers() == []


def test_a_crashed_job_resumes_from_its_checkpoint(launch, tmp_path):
    ckpt = tmp_path / "ckpt"
    crash = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 4, 32,
                   json.dumps({"ckpt": str(ckpt), "crash_in_epoch": 2}))
    assert crash.wait(timeout=300) == 1
    assert "RuntimeError: worker 1 crashes in epoch 2" in crash.err
    assert sorted(p.name for p in ckpt.iterdir()) == ["ckpt-000000", "ckpt-000001"]
    resume_like_one_process(launch, tmp_path, ckpt, crash)


def test_max_restarts_resumes_from_the_last_complete_epoch(launch, tmp_path):
    # Epoch 2's checkpoint write waits 1.5 s: worker 1's crash as epoch 3 begins tears the job
    # down while worker 0 still writes it, which SIGTERM must let it finish.
    ckpt = tmp_path / "ckpt"
    job = launch("-n", 2, "-s", 1, "--max-restarts", 2, "--log-dir", tmp_path / "logs", SCRIPT,
                 tmp_path, 4, 32, json.dumps({"ckpt": str(ckpt), "crash_in_epoch": 2,
                                              "slow_write": [1, 1.5]}))
    assert job.wait(timeout=300) == 0, job.err
    assert "worker 1 failed first: exit code 1" in job.err
    assert "RuntimeError: worker 1 crashes in epoch 2" in job.err
    assert "restarting the job (1 of 2)" in job.err and "succeeded after 1 restart(s)" in job.err
    logs = tmp_path / "logs"
    assert "crashes in epoch 2" in (logs / "worker.1.log").read_text()  # kept, not overwritten
    assert "crashes" not in (logs / "worker.1.restart1.log").read_text()
    # the restarted fit says it resumed, on worker 0 only
    said = f"fit: resuming from {ckpt} after epoch 2 of 4 (resume=False starts over)"
    assert f"[worker 0] {said}\n" in job.out and "[worker 1] fit:" not in job.out
    assert said in (logs / "worker.0.restart1.log").read_text()
    (p0, p1), (h0, _) = job_results(tmp_path, 2)
    ref, ref_history = one_process(4, 64)
    assert_same_params(p0, ref, 1e-4)
    assert_same_params(p1, p0)
    assert_same_history(h0, ref_history)
    assert job.leftovers() == []


def test_dist_async_trains(launch, tmp_path):
    # Plain SGD: with momentum 0.9 on the servers, two workers' stale pushes sometimes
    # diverged (1 run in ~10). This setting ended at 0.72-0.78 of the first loss in 16 runs.
    job = launch("-n", 2, "-s", 1, "--kvstore", "dist_async", SCRIPT, tmp_path, 12, 16,
                 json.dumps({"clip": 1.0, "lr": 0.1, "momentum": 0.0}))
    assert job.wait(timeout=300) == 0, job.err
    _, histories = job_results(tmp_path, 2)
    for h in histories:  # in async mode each worker reports its own share
        assert h["loss"][-1] < h["loss"][0] * 0.85
        assert h["val_loss"][-1] < h["val_loss"][0]


# several fits under dist_async: the job of the BatchNorm test below (the same fits, with
# BatchNorm in the nets), run once for both
SEVERAL_ASYNC = ("dist_async", 2, 16, {"batchnorm": True, "several": True, "lr": 0.1,
                                       "momentum": 0.0})


@pytest.mark.parametrize("kind", ["dist_sync", "dist_async"])
def test_several_fits_in_one_job_finish_and_agree(shared, kind):
    opts = {"several": True, "lr": 0.1, "momentum": 0.0}
    job, path, leftovers = shared(kind, 2, 16, opts) if kind == "dist_sync" \
        else shared(*SEVERAL_ASYNC)
    assert job.proc.returncode == 0, job.err
    (p0, p1), (h0, h1) = job_results(path, 2)
    assert len(h0["loss"]) == 2
    if kind == "dist_sync":  # async workers apply their pushes in no fixed order
        assert h0 == h1
        assert_same_params(p1, p0)
        ref, ref_history = one_process(2, 32, opts)
        assert_same_params(p0, ref, 1e-4)
        assert_same_history(h0, ref_history)
    assert leftovers == []


def test_a_stop_mid_epoch_then_resume_equals_an_uninterrupted_job(launch, tmp_path):
    ckpt = tmp_path / "ckpt"
    stopped = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 4, 32,
                     json.dumps({"ckpt": str(ckpt), "stop_at": [1, 1]}))
    assert stopped.wait(timeout=300) == 0, stopped.err
    _, (h0, h1) = job_results(tmp_path, 2)
    assert len(h0["loss"]) == len(h1["loss"]) == 2  # epoch 2 finished, then both stopped
    resume_like_one_process(launch, tmp_path, ckpt, stopped)


def test_a_non_finite_loss_stops_every_worker_and_names_the_rank(launch, tmp_path):
    ckpt = tmp_path / "ckpt"
    job = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 4, 16,
                 json.dumps({"ckpt": str(ckpt), "poison": [1, 1]}))
    assert job.wait(timeout=300) == 1
    assert "worker 1 failed first" in job.err
    # checked before the push: worker 0 never sees the NaN, it is stopped by the launcher
    assert "FloatingPointError: training loss is nan in epoch 2/4, batch 3/5 on worker 1" \
        in job.err
    assert "on worker 0" not in job.err
    assert [p.name for p in ckpt.iterdir()] == ["ckpt-000000"]  # epoch 1's, intact
    assert job.leftovers() == []


def test_regression_metrics_of_a_job_are_exact(launch, tmp_path):
    job = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 2, 32,
                 json.dumps({"regression": True, "lr": 0.05, "momentum": 0.0}))
    assert job.wait(timeout=300) == 0, job.err
    _, (h0, h1) = job_results(tmp_path, 2)
    assert h0 == h1
    exact = json.loads((tmp_path / "metrics.0.json").read_text())
    assert h0["val_mse"][-1] == pytest.approx(exact["mse"], rel=1e-6)
    assert h0["val_mae"][-1] == pytest.approx(exact["mae"], rel=1e-6)


def test_batchnorm_trains_under_dist_async(shared):
    # each worker's statistics are averaged over its own devices only (no sums through servers)
    job, path, leftovers = shared(*SEVERAL_ASYNC)
    assert job.proc.returncode == 0, job.err
    _, histories = job_results(path, 2)
    assert all(len(h["loss"]) == 2 for h in histories)
    assert leftovers == []


# a plain dist_sync job of BatchNorm nets, 2 epochs of 16: run once for the next test and the
# time split's
BATCHNORM_SYNC = ("dist_sync", 2, 16, {"batchnorm": True})


def test_batchnorm_statistics_are_equal_on_every_worker(shared):
    job, path, _ = shared(*BATCHNORM_SYNC)
    assert job.proc.returncode == 0, job.err
    (p0, p1), _ = job_results(path, 2)
    stats = [k for k in p0 if "running" in k]
    assert len(stats) == 2
    for key in p0:
        assert np.array_equal(p0[key], p1[key]), key


def test_two_workers_accumulating_2_batches_of_16_compute_one_process_of_64(launch, tmp_path):
    opts = {"accumulate": 2, "clip": 0.3, "schedule": True}
    job = launch("-n", 2, "-s", 1, SCRIPT, tmp_path, 3, 16, json.dumps(opts))
    assert job.wait(timeout=300) == 0, job.err
    (p0, p1), (h0, h1) = job_results(tmp_path, 2)
    assert_same_params(p1, p0)
    ref, ref_history = one_process(3, 64, {"clip": 0.3, "schedule": True})
    assert_same_params(p0, ref, 1e-4)
    assert_same_history(h0, ref_history)


def test_a_jobs_time_split_has_the_mean_and_the_slowest_worker(shared):
    job, path, leftovers = shared(*BATCHNORM_SYNC)
    assert job.proc.returncode == 0, job.err
    histories = [json.loads((path / f"history.{r}.json").read_text()) for r in range(2)]
    split = ("data_seconds", "compute_seconds", "sync_seconds")
    for key in (*split, *(f"slowest_{k}" for k in split), "slowest_worker"):
        assert histories[0][key] == histories[1][key], key  # every worker reports the same
    h = histories[0]
    mean_epoch = (histories[0]["epoch_seconds"][-1] + histories[1]["epoch_seconds"][-1]) / 2
    assert sum(h[k][-1] for k in split) == pytest.approx(mean_epoch, rel=0.25)
    assert h["sync_seconds"][-1] > 0 and h["slowest_worker"][-1] in (0.0, 1.0)


def test_shards_of_different_lengths_fail_quickly_on_every_worker(launch, tmp_path):
    """Also evaluate's shards, and fit calls that differ in epochs or seed."""
    started = time.monotonic()
    job = launch("-n", 2, "-s", 1, RULES_SCRIPT, tmp_path, "shard")
    assert job.wait(timeout=120) == 1, job.err
    assert time.monotonic() - started < 60  # not a hang, not the stall timeout
    line = ("the workers hold different data (train_data samples: worker 0 129, worker 1 128); "
            "pass the whole dataset on every worker")
    for rank in (0, 1):
        assert (tmp_path / f"{rank}.error").read_text().startswith(line), rank
    assert f"ValueError: {line}" in job.err
    for rank in (0, 1):
        assert (tmp_path / f"{rank}.evaluate").read_text().startswith(
            "the workers called evaluate with different data (data samples: worker 0 129, "
            "worker 1 128)")
        assert (tmp_path / f"{rank}.epochs").read_text() == (
            "the workers called fit with different settings (epochs: worker 0 2, worker 1 3); "
            "every worker must make the same fit call")
        assert (tmp_path / f"{rank}.seed").read_text().startswith(
            "the workers called fit with different settings (seed (-1: none): worker 0 0, "
            "worker 1 1)")
        assert (tmp_path / f"{rank}.lr").read_text().startswith(
            "the workers called fit with different settings (optimizer and its settings (a "
            "checksum): worker 0 ")
        assert (tmp_path / f"{rank}.evenshard").read_text().startswith(
            "the workers hold different data (train_data rows (a checksum): worker 0 ")
    assert job.leftovers() == []


@pytest.mark.parametrize("kind", ["dist_sync", "dist_async"])
def test_fits_in_a_row_on_one_checkpoint_dir_agree_on_the_checkpoint(launch, tmp_path, kind):
    # without the wait for rank 0's write, a worker found an older checkpoint in every run tried;
    # two rounds in one job (each on a new net and checkpoint_dir), where two jobs ran one each
    job = launch("-n", 2, "-s", 1, "--kvstore", kind, RULES_SCRIPT, tmp_path, "refit", 2)
    assert job.wait(timeout=300) == 0, job.err
    for rank in (0, 1):  # each fit resumed the previous one's last epoch, on every worker
        assert json.loads((tmp_path / f"{rank}.done").read_text()) == [[0, 1, 2, 3, 4]] * 2, rank
    assert job.leftovers() == []
