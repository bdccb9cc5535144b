"""`gluondist bench kvstore` as a command: each bad input is one line and exit 2, and every
layout's options are checked before the first job (the bench's pieces: unit/test_bench.py;
its real jobs: e2e/test_bench_jobs.py)."""
import pytest

from conftest import run_cli


@pytest.mark.parametrize("args,message", [
    (["--servers", "0,1"], "distinct server counts"),
    (["--servers", "1,1"], "distinct server counts"),
    (["--mbytes", "0"], "--mbytes"),
    (["--mbytes", "nan"], "--mbytes"),
    (["-n", "0"], "--num-workers"),
    (["-n", "2:3"], "the bench runs a fixed number of workers"),
    (["--plot", "/nonexistent/bench.png"], "--plot"),
    (["--compression", "none,fp8"], "--compression"),
    (["--compression", "fp16,fp16"], "--compression"),
    (["--chunk-bytes", "100"], "--chunk-bytes"),
    (["--chunk-bytes", "65536,65536"], "distinct byte counts"),
    (["--chunk-bytes", "64k"], "distinct byte counts"),
    (["--env", "GLUONDIST_CHUNK_BYTES=12"], "GLUONDIST_CHUNK_BYTES='12'"),
    (["--servers", "1,,2"], "distinct server counts"),
    (["--keys", "100000000", "--mbytes", "0.001"], "'--keys': 100000000 is not in the range"),
    (["--keys", "5000", "--mbytes", "0.001"], "give at most 262 keys or more megabytes"),
    (["--mbytes", "1e12"], "over MXNet's 2^31 elements an array"),
    (["--env", "MXNET_KVSTORE_BIGARRAY_BOUND=abc"], "MXNET_KVSTORE_BIGARRAY_BOUND='abc'"),
    (["--env", "MXNET_KVSTORE_BIGARRAY_BOUND=2147483648"], "a whole number of elements below"),
    (["--chunk-bytes", "1024", "--mbytes", "300"], "need 307200 kvstore keys, more than"),
    (["--mbytes", "200000", "--keys", "100"], "need 400000 kvstore keys, more than"),
])
def test_bad_bench_input_is_one_line_and_exit_2(args, message):
    out = run_cli("bench", "kvstore", *args)
    assert out.returncode == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("server_hosts, servers, message", [
    ("s,s", "1", "--server-hosts 's,s' names host 's' twice"),
    ("s:2", "1,3", "-s 3 exceeds the 2 server slots in --server-hosts s:2")])
def test_every_layouts_options_are_checked_before_the_first_job(server_hosts, servers,
                                                                message):
    # hosts a and b do not exist: a first (colocated) job would fail on them instead
    out = run_cli("bench", "kvstore", "--launcher", "ssh", "-H", "a:1,b:1", "--server-hosts",
                  server_hosts, "--servers", servers)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert "push and pull" not in out.stderr  # no job was started

