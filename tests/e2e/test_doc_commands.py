"""The docs' commands that start jobs, run as they are (tests/docpages.py reads each from its
page): in a directory holding what the page says it holds, with this environment's `gluondist`
and `python` first on PATH, as in the virtual environment a user activated."""
import json
import re
import subprocess
import threading
import uuid

import docpages
from conftest import ROOT, SCRIPTS, TAG, kill_tagged, wait_until


# A train.py of the kind the pages mean: a script that calls fit as it would in one process.
TRAIN = '''import argparse

import mxnet as mx
import numpy as np

import gluondist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
X = np.random.RandomState(0).rand(256, 8).astype(np.float32)
y = (X.sum(axis=1) > 4).astype(np.float32)
history = gluondist.fit(mx.gluon.nn.Dense(2), (X, y), epochs=args.epochs, batch_size=8, seed=0)
if gluondist.kvstore.rank() == 0:
    print(f"trained {len(history.history['loss'])} epochs on {gluondist.kvstore.num_workers()} "
          "workers", flush=True)
'''


def user_directory(path):
    """What the pages' commands expect beside them: train.py, and mypkg for `python -m`."""
    (path / "train.py").write_text(TRAIN)
    (path / "mypkg").mkdir()
    (path / "mypkg" / "__init__.py").write_text("")
    (path / "mypkg" / "train.py").write_text(TRAIN)
    return path


def test_the_first_launch_commands_run_as_written(tmp_path):
    """Getting started's and Launching jobs' block (the same three commands on both pages)."""
    first = docpages.block("docs/index.md", "gluondist launch -n 4")
    assert docpages.block("docs/launch.md", "gluondist launch -n 4") == first
    four, module, dry = docpages.commands(first)
    user_directory(tmp_path)

    code, out, err, _ = docpages.shell(four, tmp_path)
    assert code == 0, err
    assert "[worker 0] trained 10 epochs on 4 workers" in out
    code, out, err, _ = docpages.shell(module, tmp_path)
    assert code == 0, err
    assert "[worker 0] trained 1 epochs on 2 workers" in out
    # that `python` is the launcher's own, so the module ran under the bootstrap (launch.md)
    code, out, err, _ = docpages.shell(module.replace(" -s 1 ", " -s 1 --dry-run "), tmp_path)
    assert code == 0 and re.search(r"^worker 0 on 127\.0\.0\.1: \S+ -m "
                                   r"gluondist\.launcher\.child\.bootstrap -m mypkg\.train$",
                                   out, re.M), out + err
    code, out, err, _ = docpages.shell(dry, tmp_path)
    assert code == 0, err
    assert re.search(r"^worker 1 on 127\.0\.0\.1: \S+ -m gluondist\.launcher\.child\.bootstrap "
                     r"train\.py$", out, re.M), out
    assert not (tmp_path / "logs").exists()  # a dry run creates nothing


def test_the_python_api_block_runs_as_written(tmp_path, monkeypatch):
    script = docpages.block("docs/launch.md", "from pathlib import Path\n\nPath(\"train.py\")")
    block = docpages.block("docs/launch.md", "import gluondist\n\nresult = gluondist.launch(")
    user_directory(tmp_path)
    monkeypatch.chdir(tmp_path)
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG, tag)
    namespace = {}  # the blocks import what they use, as a fresh notebook would need
    try:
        exec(compile(script, "docs/launch.md", "exec"), namespace)  # the page's train.py
        assert (tmp_path / "train.py").read_text() == TRAIN
        exec(compile(block, "docs/launch.md", "exec"), namespace)
    finally:
        stray = kill_tagged(tag)
    result = namespace["result"]
    assert (result.exit_code, result.failure) == (0, None)
    assert "trained 3 epochs on 2 workers" in result.logs["worker 0"]
    assert stray == []


def test_the_examples_run_as_the_page_shows():
    """Getting started's example commands, from the checkout, with the .venv the first of the
    README's commands makes (the one this suite runs in, under CI)."""
    venv = ROOT / ".venv" / "bin"
    assert (venv / "python").exists(), "the README's first command makes .venv in the checkout"
    commands = docpages.commands(docpages.block("docs/index.md", ".venv/bin/python examples/"))
    outputs = []
    for command in commands:
        code, out, err, _ = docpages.shell(command, ROOT)
        assert code == 0, f"{command}\n{err}"
        outputs.append(out)
    assert float(re.search(r"final validation accuracy: ([\d.]+)", outputs[0])[1]) > 0.9
    assert float(re.search(r"final validation accuracy: ([\d.]+)", outputs[1])[1]) > 0.9
    # the two corrected recipes (recipes.md) learn: each worker's loss, and the two devices'
    for rank in (0, 1):
        losses = re.search(rf"\[worker {rank}\] worker {rank} of 2: loss per epoch ([\d. ]+)",
                           outputs[2]).group(1).split()
        assert float(losses[-1]) < float(losses[0]) / 2
    losses = outputs[3].split("loss per epoch")[1].split()
    assert "2 devices" in outputs[3] and float(losses[-1]) < float(losses[0]) / 2


def test_the_own_loop_page_runs_as_a_job(tmp_path):
    loop = next(b.code for b in docpages.blocks("docs/own-loop.md") if b.language == "python")
    (tmp_path / "train_loop.py").write_text(loop)
    [command] = docpages.commands(docpages.block("docs/own-loop.md", "gluondist launch"))
    code, out, err, _ = docpages.shell(command, tmp_path)
    assert code == 0, err
    losses = [float(v) for v in re.findall(r"^\[worker 0\] epoch \d: loss ([\d.]+)$", out, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2, out
    assert "[worker 1] epoch" not in out  # rank 0 alone prints


def test_the_bench_command_runs_as_written(tmp_path):
    [command] = docpages.commands(docpages.block("docs/servers.md", "gluondist bench kvstore -n"))
    code, out, err, _ = docpages.shell(command, tmp_path, timeout=600)
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert [r["servers"] for r in result["rows"]] == [1, 2]
    assert result["recommended_servers"] in (1, 2)


def test_the_security_pages_ss_command_lists_a_running_jobs_ports(tmp_path):
    """security.md's command, while a local job of one scheduler, one server and two workers
    runs: it shows the four processes' listening sockets (and those of any other job here)."""
    [command] = docpages.commands(docpages.block("docs/security.md", "ss -ltnp"))
    tag = uuid.uuid4().hex
    job = subprocess.Popen(["gluondist", "launch", "-n", "2", "-s", "1", "--env", f"{TAG}={tag}",
                            str(SCRIPTS / "job.py"), "hang", "all"], cwd=tmp_path,
                           env=docpages.venv_env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: len(list(tmp_path.glob("*.hanging"))) == 2, timeout=120,
                   message="both workers to train and hang")
        code, out, err, _ = docpages.shell(command, tmp_path)
        assert code == 0, err
        pids = {int(p) for p in re.findall(r"pid=(\d+),", out)}
        ours = {pid for pid in pids if f"{TAG}={tag}".encode() in
                open(f"/proc/{pid}/environ", "rb").read()}
        assert len(ours) == 4, out  # scheduler, server, two workers
    finally:
        job.terminate()
        threading.Timer(30, job.kill).start()
        job.wait()
        assert kill_tagged(tag) == []
