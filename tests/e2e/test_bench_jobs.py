"""gluondist bench kvstore with real jobs: one per server count, and a failed job ends the
bench with launch's report and exit code (the table and model alone: unit/test_bench.py)."""
import json
import uuid

import pytest


def test_the_bench_runs_a_real_job_per_server_count(tmp_path):
    from conftest import TAG, kill_tagged, run_cli
    tag = uuid.uuid4().hex
    try:
        out = run_cli("bench", "kvstore", "-n", 2, "--servers", "1,2", "--mbytes", 2, "--keys",
                      3, "--steps", 3, "--json", "--plot", tmp_path / "bench.png",
                      "--chunk-bytes", "1048576,65536",
                      "--env", f"{TAG}={tag}",
                      "--env", "MXNET_KVSTORE_BIGARRAY_BOUND=100000", timeout=300)
    finally:
        assert kill_tagged(tag) == []  # every job of the bench ended with it
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # a row per server count and chunk size, in the order given
    assert [(r["servers"], r["chunk_bytes"]) for r in result["rows"]] == \
        [(1, 1 << 20), (1, 1 << 16), (2, 1 << 20), (2, 1 << 16)]
    # on one host each chunk size's rows are predicted to take its first row's time
    first = {r["chunk_bytes"]: r["step_s"] for r in result["rows"][:2]}
    assert all(r["step_s"] > 0 and r["worker_mb_per_step"] == 4 and r["layout"] == "one host"
               and r["predicted_step_s"] == first[r["chunk_bytes"]]
               for r in result["rows"])
    # 3 keys above the bound the jobs got from --env (not MXNet's default, under which keys 0
    # and 2 would go whole to server 0): sliced evenly, each server moves half of the 8 MB
    assert [r["busiest_server_mb_per_step"] for r in result["rows"][::2]] == \
        pytest.approx([8, 4], rel=1e-5)
    # 64 KiB chunks go whole to one server each, alternating: about half each
    assert result["rows"][1]["busiest_server_mb_per_step"] == pytest.approx(8, rel=1e-5)
    assert 4 <= result["rows"][3]["busiest_server_mb_per_step"] < 4.5
    assert result["recommended_chunk_bytes"] in (1 << 20, 1 << 16)
    assert result["chunk_advice"].startswith("chunks: ") and "chunks: " in out.stdout
    assert result["recommended_servers"] in (1, 2)
    assert result["recommended_layout"] == "one host"
    assert "recommended: -s" in out.stdout and "-s 2: 2 worker(s)" in out.stderr
    assert (tmp_path / "bench.png").read_bytes().startswith(b"\x89PNG")


def test_without_chunk_bytes_the_bench_measures_the_size_fit_would_use():
    from conftest import run_cli
    out = run_cli("bench", "kvstore", "-n", 2, "--servers", "1", "--mbytes", 1, "--keys", 1,
                  "--steps", 1, "--json", "--env", "GLUONDIST_CHUNK_BYTES=65536", timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["chunk_bytes"] for r in result["rows"]] == [65536]
    assert result["chunk_advice"] == "" and "chunks:" not in out.stdout


def test_a_failed_bench_job_ends_the_bench_with_launchs_report_and_code():
    from conftest import run_cli
    out = run_cli("bench", "kvstore", "-n", 2, "--servers", "1", "--start-timeout", "0.2",
                  timeout=300)
    assert out.returncode == 1, out.stderr
    assert "the job did not form within 0.2s" in out.stderr
    assert "recommended" not in out.stdout
