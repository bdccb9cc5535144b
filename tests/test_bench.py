"""gluondist bench kvstore: the table, the model and the recommendation (pure), and real jobs."""
import json
import uuid

import pytest

from gluondist import bench


def test_the_model_is_calibrated_by_the_single_server_row():
    # across hosts: servers share the workers' traffic until each worker's own link is the limit
    assert bench.predict(1.0, 1.0, 4, one_host=False) == 1.0
    assert bench.predict(1.0, 0.5, 4, one_host=False) == 0.5
    assert bench.predict(1.0, 0.125, 4, one_host=False) == 0.25
    # on one host every byte crosses the same memory: the server count does not matter
    assert bench.predict(1.0, 0.25, 4, one_host=True) == 1.0


def test_keys_are_placed_as_mxnet_places_them():
    big = bench.key_sizes(64, 8)  # 2 M elements each: sliced over every server
    assert sum(big) == 16 * 2 ** 20 and bench.busiest_share(big, 4) == pytest.approx(0.25)
    small = bench.key_sizes(2, 1)  # 0.5 M elements: one key, whole on one server
    assert bench.busiest_share(small, 4) == 1.0


def test_the_model_takes_the_big_array_bound_the_job_gets():
    sizes = bench.key_sizes(2, 3)  # 174,763 elements each
    assert bench.busiest_share(sizes, 2) == pytest.approx(2 / 3)  # whole keys: 0, 2 on one
    assert bench.busiest_share(sizes, 2, bound=100_000) == pytest.approx(0.5)  # sliced


@pytest.mark.parametrize("hosts,one", [("node1:4", True), ("node1:1,node2:1", False),
                                       ("node1:2,node2:2", False)])
def test_one_host_or_many_comes_from_the_resolved_placement(hosts, one):
    # "node1:4" is one host of four slots (the raw text is 7 characters); with two hosts the
    # servers go round-robin over both, so the jobs span hosts even when the workers fit one.
    from gluondist.launcher.options import LaunchOptions
    from gluondist.launcher.session import resolve
    options = resolve(LaunchOptions((bench.WORKER,), 2, 1, launcher="ssh", hosts=hosts), {})
    assert bench.one_host(options, [1, 2]) is one
    assert bench.one_host(LaunchOptions((bench.WORKER,), 2, 1), [1, 2, 4])  # local


def test_rows_and_recommendation():
    table = bench.rows([0.16, 0.15, 0.16], [1, 2, 4], workers=2,
                       sizes=bench.key_sizes(64, 8), one_host=True)
    assert [r.servers for r in table] == [1, 2, 4]
    assert table[0].worker_mb == 128 and table[1].server_mb == 128  # 2 x 64 x 2 workers / 2
    assert table[2].predicted_s == 0.16
    assert bench.recommend(table) == 1  # 0.16 is within 10% of the best 0.15
    fast = bench.rows([1.0, 0.5, 0.48], [1, 2, 4], 4, bench.key_sizes(64, 8), one_host=False)
    assert bench.recommend(fast) == 2 and fast[1].predicted_s == 0.5
    lopsided = bench.rows([1.0, 1.0], [1, 4], 2, bench.key_sizes(2, 1), one_host=False)
    assert lopsided[1].server_mb == 8  # one key below the bound: one server does it all


def test_worker_zeros_result_line_is_found():
    line = bench.PREFIX + json.dumps({"step_s": 0.1, "bytes": 8})
    assert bench.parse(["noise", line])["step_s"] == 0.1
    assert bench.parse(["noise"]) is None


@pytest.mark.slow
def test_the_bench_runs_a_real_job_per_server_count():
    from conftest import TAG, kill_tagged, run_cli
    tag = uuid.uuid4().hex
    try:
        out = run_cli("bench", "kvstore", "-n", 2, "--servers", "1,2", "--mbytes", 2, "--keys",
                      3, "--steps", 3, "--json", "--env", f"{TAG}={tag}",
                      "--env", "MXNET_KVSTORE_BIGARRAY_BOUND=100000", timeout=300)
    finally:
        assert kill_tagged(tag) == []  # every job of the bench ended with it
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["servers"] for r in result["rows"]] == [1, 2]
    assert all(r["step_s"] > 0 and r["worker_mb_per_step"] == 4 for r in result["rows"])
    # 3 keys above the bound the jobs got from --env (not MXNet's default, under which keys 0
    # and 2 would go whole to server 0): sliced evenly, each server moves half of the 8 MB
    assert [r["busiest_server_mb_per_step"] for r in result["rows"]] == \
        pytest.approx([8, 4], rel=1e-5)
    assert result["recommended_servers"] in (1, 2)
    assert "recommended: -s" in out.stdout and "-s 2: 2 worker(s)" in out.stderr


@pytest.mark.slow
def test_a_failed_bench_job_ends_the_bench_with_launchs_report_and_code():
    from conftest import run_cli
    out = run_cli("bench", "kvstore", "-n", 2, "--servers", "1", "--start-timeout", "0.2",
                  timeout=300)
    assert out.returncode == 1, out.stderr
    assert "the job did not form within 0.2s" in out.stderr
    assert "recommended" not in out.stdout


@pytest.mark.parametrize("args,message", [
    (["--servers", "0,1"], "distinct server counts"),
    (["--servers", "1,1"], "distinct server counts"),
    (["--mbytes", "0"], "--mbytes"),
    (["--mbytes", "nan"], "--mbytes"),
    (["-n", "0"], "--num-workers"),
])
def test_bad_bench_input_is_one_line_and_exit_2(args, message):
    from conftest import run_cli
    out = run_cli("bench", "kvstore", *args)
    assert out.returncode == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
