"""Every script in benchmarks/ answers ``--help`` (exit 0, its usage), and a worker script that
other benchmarks start refuses a wrong command line in one line (exit 2), big_layer.py,
dist_worker.py and tcp_pair.py before MXNet starts: fresh interpreters, so this tier."""
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py"))
WORKERS = ["big_layer.py", "dist_worker.py", "peer_train.py", "tcp_pair.py"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_answers_help(script):
    run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("name", WORKERS)
def test_a_worker_script_refuses_a_wrong_command_line_in_one_line(name):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert line.startswith(f"{name}: 0 arguments given") and f"see {name} --help" in line


def peer_train(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peer_train.py"), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_peer_train_refuses_an_unknown_way_to_train_in_one_line(tmp_path):
    run = peer_train("mpi", str(tmp_path / "out.json"), "1")
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("peer_train.py: 'mpi' is no way to train") and "horovod-comm" in line


def test_peer_train_refuses_epochs_that_are_no_whole_number_in_one_line(tmp_path):
    run = peer_train("gluondist", str(tmp_path / "out.json"), "x")
    assert run.returncode == 2
    assert run.stderr.strip() == "peer_train.py: EPOCHS 'x' is not a whole number of at least 1"


@pytest.mark.parametrize("model", ["resnet99", "resnet18_v1@big"])
def test_peer_train_refuses_a_model_it_cannot_build_in_one_line(tmp_path, model):
    run = peer_train("gluondist", str(tmp_path / "out.json"), "1", model)
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert line.startswith(f"peer_train.py: MODEL {model!r} is not mlp or a model-zoo name")


@pytest.fixture
def peers(tmp_path):
    """peers.py with a Horovod Python that passes its checks: a program with horovodrun
    beside it (neither is run: every refusal comes before namespaces or Horovod's probe)."""
    for name in ("python", "horovodrun"):
        (tmp_path / name).write_text("#!/bin/sh\nexit 1\n")
        (tmp_path / name).chmod(0o755)

    def run(*args):
        return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers.py"),
                               "--horovod-python", str(tmp_path / "python"), *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    return run


@pytest.mark.parametrize("args, says", [
    (["--workers", "1", "3"], "--workers, --timeline: give 2 or more workers each"),
    (["--timeline", "0"], "--workers, --timeline: give 2 or more workers each"),
    (["--epochs", "1"], "--epochs 1: give 2 or more; the first epoch is not counted"),
    (["--model", "resnet99"], "--model 'resnet99': give mlp or a model-zoo name"),
    (["--rounds", "-1"], "--rounds -1: give 1 or more, or 0 with --timeline W"),
    (["--rounds", "0", "--timeline"], "--rounds 0: give 1 or more, or 0 with --timeline W"),
    (["--workers", "2", "2"], "--workers 2 2: give each once"),
    (["--rate", "xmbit"], "--rate xmbit: give a rate of at least 1kbit as tc does"),
    (["--rate", "0.0001kbit"], "--rate 0.0001kbit: give a rate of at least 1kbit"),
    (["--arms", "horovod", "horovod"], "--arms horovod horovod: give each once"),
    (["--env", "DMLC_ROLE=server"], "--env DMLC_ROLE: the launcher sets it"),
    (["--env", "MXNET_KVSTORE_BIGARRAY_BOUND=abc"], "MXNET_KVSTORE_BIGARRAY_BOUND='abc'"),
    (["--json", "/"], "--json '/': give a FILE in a directory you can write"),
    (["--json", ""], "--json '': give a FILE in a directory you can write"),
    (["--env", "GLUONDIST_CHUNK_BYTES=abc"], "GLUONDIST_CHUNK_BYTES='abc': give a whole number"),
    (["--variant", "a=GLUONDIST_CHUNK_BYTES=12"], "--variant a=GLUONDIST_CHUNK_BYTES=12: "
                                                  "GLUONDIST_CHUNK_BYTES='12': give a whole"),
    (["--variant", "a=GLUONDIST_CHUNK_BYTES=65536", "--variant", "a=GLUONDIST_CHUNKS_IN_FLIGHT=4"],
     "--variant a=GLUONDIST_CHUNKS_IN_FLIGHT=4: the label 'a' is given twice"),
    (["--json", "/nonexistent/dir/p.json"], "--json '/nonexistent/dir/p.json': give a FILE"),
    (["--horovod-python", "/nonexistent/python"], "--horovod-python /nonexistent/python: no "
                                                  "Python with horovodrun beside it")])
def test_peers_refuses_what_it_cannot_run_before_it_builds_hosts(peers, args, says):
    run = peers(*args)
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"peers.py: error: {says}")


def test_peers_refuses_a_variant_named_as_an_arm_of_parts(peers):
    run = peers("--parts", "--variant", "comm=GLUONDIST_CHUNK_BYTES=65536")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        "peers.py: error: --variant comm=GLUONDIST_CHUNK_BYTES=65536: 'comm' names an arm of "
        "--parts; give the variant another label")


@pytest.mark.parametrize("setting, says", [
    ("NOEQ", "--env 'NOEQ': write KEY=VALUE"),
    ("GLUONDIST_CHUNKS_IN_FLIGHT=x", "GLUONDIST_CHUNKS_IN_FLIGHT='x': give a whole number"),
    ("GLUONDIST_CHUNKS_IN_FLIGHT=1 --rate xmbit", "--rate xmbit: give a rate of at least"),
    ("GLUONDIST_CHUNKS_IN_FLIGHT=1 --chunk-bytes 12", "--chunk-bytes='12': give a whole"),
    ("GLUONDIST_CHUNKS_IN_FLIGHT=1 --most 0", "--most 0, --mbytes 8: give at least 1 worker"),
    ("GLUONDIST_CHUNKS_IN_FLIGHT=1 --json /", "--json '/': give a FILE")])
def test_workers_refuses_a_bad_setting_before_it_builds_hosts(setting, says):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "workers.py"), "--env",
                          *setting.split()], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"workers.py: error: {says}")
