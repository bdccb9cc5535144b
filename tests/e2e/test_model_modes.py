"""fit's modes on convolutional nets in real 2-worker jobs (tests/models.py's ``convbn``, a
Conv2D, BatchNorm and Dense net, and ``conv``, the same without BatchNorm, on 12x12 images):
devices inside each worker, the pipeline, compression, chunked updates, dist_async. Each mode
on the MLP, and step checkpoints on both: e2e/test_fit_job.py, test_compression_jobs.py,
test_chunk_jobs.py, test_step_checkpoint_jobs.py. Arrays are compared one by one, by name."""
import json

import numpy as np
import pytest

from conftest import SCRIPTS, assert_arrays_close, job_results, one_process

SCRIPT = str(SCRIPTS / "fit_job.py")


def run(launch, path, opts, epochs=2, batch=16, *args, env=None):
    path.mkdir(exist_ok=True)
    job = launch("-n", 2, "-s", 1, *args, SCRIPT, path, epochs, batch, json.dumps(opts),
                 env=env)
    assert job.wait(timeout=300) == 0, job.err
    assert job.leftovers() == []
    (p0, p1), _ = job_results(path, 2)
    for key in p0:  # every worker ends with the same arrays
        assert np.array_equal(p0[key], p1[key]), key
    return p0


def test_two_devices_in_each_of_two_workers_compute_one_process_on_four(launch, tmp_path):
    """Each worker splits its slice over its 2 devices: BatchNorm normalises 4 slices of every
    global batch, as one process on 4 devices does; the statistics averaged over all 4."""
    got = run(launch, tmp_path, {"net": "convbn", "ctx": 2})
    ref, _ = one_process(2, 32, {"net": "convbn"}, ctx=4)
    assert_arrays_close(got, ref, 1e-5, "convbn, 2 workers x 2 devices")


def test_a_conv_pipeline_in_each_worker_computes_one_process(launch, tmp_path):
    got = run(launch, tmp_path, {"net": "conv", "pipeline": 2})
    ref, _ = one_process(2, 32, {"net": "conv"})
    assert_arrays_close(got, ref, 1e-5, "conv in 2 stages x 2 workers")


@pytest.mark.parametrize("compression", ["fp16", "2bit"])
def test_compressed_conv_gradients_whole_equal_chunked(launch, tmp_path, compression):
    """Compressed conv gradients sent whole and in 1 KiB chunks (the first conv's weight in 1,
    the second's in 5, the Dense layer's in 10): bit-equal; and close to float32's run (fp16)."""
    whole = run(launch, tmp_path / "whole", {"net": "convbn", "compression": compression},
                env={"GLUONDIST_CHUNK_BYTES": "0"})
    chunked = run(launch, tmp_path / "chunked", {"net": "convbn", "compression": compression},
                  env={"GLUONDIST_CHUNK_BYTES": "1024"})
    for key in whole:
        assert np.array_equal(whole[key], chunked[key]), key
    if compression == "fp16":
        ref, _ = one_process(2, 32, {"net": "convbn"}, ctx=2)
        assert_arrays_close(whole, ref, 1e-2, "convbn, fp16")


def test_conv_chunks_updated_as_they_land_equal_one_update(launch, tmp_path):
    """Chunk updates (the default) against one update after the last pull, on 1 KiB chunks."""
    early = run(launch, tmp_path / "early", {"net": "convbn"},
                env={"GLUONDIST_CHUNK_BYTES": "1024"})
    late = run(launch, tmp_path / "late", {"net": "convbn"},
               env={"GLUONDIST_CHUNK_BYTES": "1024", "GLUONDIST_CHUNK_UPDATES": "0"})
    for key in early:
        assert np.array_equal(early[key], late[key]), key
    ref, _ = one_process(2, 32, {"net": "convbn"}, ctx=2)
    assert_arrays_close(early, ref, 1e-5, "convbn in chunks")


def test_dist_async_trains_a_conv_net(launch, tmp_path):
    path = tmp_path / "async"
    path.mkdir()
    job = launch("-n", 2, "-s", 1, "--kvstore", "dist_async", SCRIPT, path, 6, 16,
                 json.dumps({"net": "convbn", "lr": 0.05, "momentum": 0.0}))
    assert job.wait(timeout=300) == 0, job.err
    _, histories = job_results(path, 2)
    for h in histories:
        assert h["loss"][-1] < h["loss"][0]
