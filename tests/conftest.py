import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"
ROOT = HERE.parent
TAG = "GLUONDIST_TEST_TAG"


# A shell that starts the suite in the background (`pytest &`) hands it SIGINT ignored, and
# Python then installs no KeyboardInterrupt handler: the tests that interrupt the launcher
# would wait forever. The suite always runs with Python's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)

# This machine's image sets PYTHONDONTWRITEBYTECODE=1: each of the suite's hundreds of Python
# processes then compiled gluondist anew, and in a virtualenv installed without bytecode (uv's
# default, .ci/run's 3.8-3.10) MXNet too, 4 s of CPU per import where 2 s with (measured). The
# suite and every process it starts keep what they compile (__pycache__/, ignored by git).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def wait_until(predicate, timeout=60.0, interval=0.05, message="condition"):
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def tagged_pids(tag):
    """Pids of live processes whose environment carries ``GLUONDIST_TEST_TAG=tag``."""
    needle = f"{TAG}={tag}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != b"Z":
            pids.append(int(entry))
    return pids


def role_alive(tag, role):
    """Whether a live process of ``tag`` runs as ps-lite's ``role`` (its DMLC_ROLE)."""
    def alive(pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return f"DMLC_ROLE={role}".encode() in f.read().split(b"\0")
        except OSError:
            return False
    return any(alive(pid) for pid in tagged_pids(tag))


def run_cli(*args, env=None, timeout=120):
    """`gluondist ARGS` in a subprocess; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, "-m", "gluondist.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def kill_tagged(tag):
    """SIGKILL every live process of ``tag``; returns the pids that were still alive."""
    stray = tagged_pids(tag)
    for pid in stray:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return stray


class Job:
    """A `gluondist launch` run in a subprocess, tagged so every process of it can be found."""

    def __init__(self, args, cwd, env=None):
        self.tag = uuid.uuid4().hex
        self.args = args
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gluondist.cli", "launch", "--env", f"{TAG}={self.tag}",
             *args], cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        self.out = self.err = ""

    def wait(self, timeout=120):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"launcher still running after {timeout}s: {self.args}") \
                from None
        self.out, self.err = out.decode(errors="replace"), err.decode(errors="replace")
        return self.proc.returncode

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_tagged(self.tag)
        self.proc.communicate()

    def leftovers(self, timeout=10.0):
        """Pids of the job still alive once ``timeout`` has passed (normally none at once)."""
        deadline = time.monotonic() + timeout
        while tagged_pids(self.tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        return tagged_pids(self.tag)


@pytest.fixture
def launch(tmp_path):
    """Start `gluondist launch ARGS` in tmp_path; every job is killed and checked at the end."""
    jobs = []

    def start(*args, env=None):
        job = Job([str(a) for a in args], tmp_path, env)
        jobs.append(job)
        return job

    yield start
    reap(jobs)


def reap(jobs) -> None:
    """Kill what is left of each job, and fail the test if anything of it was left."""
    for job in jobs:
        if job.proc.poll() is None:
            job.kill()
        stray = kill_tagged(job.tag)
        assert not stray, f"processes of {job.args} outlived the test: {stray}"


def load_file(name: str, path):
    """The module in the file ``path`` (a benchmark's, docs/hooks.py), loaded as ``name``."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def digits():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    order = np.random.RandomState(0).permutation(len(X))
    return X[order], y[order].astype(np.float32)


def mlp(hidden=32):
    import mxnet as mx
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(hidden, activation="relu"), mx.gluon.nn.Dense(10))
    return net


def params_of(net):
    """A net's parameters by name, as ``save_parameters`` names them (``0.weight``), each its
    first device's copy as a numpy array (tests/models.py's ``params``)."""
    from models import params
    return params(net)


def assert_same_params(got, want, rtol=0.0, what="parameters"):
    """``got`` and ``want`` (nets, or ``{name: array}``) hold arrays of the same names and
    shapes, each within relative ``rtol`` (:func:`array_rel`) of the one of its name; 0: bit
    for bit. Never a sum over all of them, which misses a swapped layer or a sign."""
    got, want = (x if isinstance(x, dict) else params_of(x) for x in (got, want))
    assert sorted(got) == sorted(want), f"{what}: the names differ: {sorted(got)} {sorted(want)}"
    shapes = {k: (np.shape(got[k]), np.shape(want[k])) for k in want
              if np.shape(got[k]) != np.shape(want[k])}
    assert not shapes, f"{what}: the shapes differ: {shapes}"
    if rtol == 0:
        bad = sorted(k for k in want if not np.array_equal(got[k], want[k]))
    else:
        bad = {k: d for k, d in ((k, array_rel(got[k], want[k])) for k in want)
               if not d <= rtol}
    assert not bad, f"{what}: off by more than {rtol}: {bad}"


def assert_same_history(got, want, rtol=1e-4, metric_rtol=1e-6):
    """Every value of two Histories (or their dicts), timings aside: the same keys and epochs;
    losses within relative ``rtol``, other metrics within ``metric_rtol`` (fit.md's claim)."""
    got, want = (curves(getattr(h, "history", h)) for h in (got, want))
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for key in want:
        tol = rtol if key.endswith("loss") else metric_rtol
        np.testing.assert_allclose(got[key], want[key], rtol=tol, atol=0, err_msg=key)


def array_rel(a, b) -> float:
    """``||a - b|| / ||b||`` of two arrays, in float64."""
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-30))


def assert_arrays_close(got, want, rtol, what="", names=None):
    """``got`` holds the arrays of ``want``, by name, and each of ``names`` (default: all)
    within relative ``rtol`` (:func:`array_rel`) of the one of its name."""
    assert sorted(got) == sorted(want), what
    off = {k: array_rel(got[k], want[k]) for k in (want if names is None else names)}
    bad = {k: d for k, d in off.items() if not d <= rtol}
    assert not bad, f"{what}: arrays off by more than {rtol}: {bad}"


def curves(history):
    """A History dict without its timing keys (which differ from run to run)."""
    from gluondist.training.callbacks import SPEED_KEYS
    return {k: v for k, v in history.items() if k not in SPEED_KEYS}


def one_process(epochs, batch, opts=None, ctx=None):
    """fit_job.py's training in this process (on the devices ``ctx``): its parameters and
    History dict."""
    import gluondist
    sys.path.insert(0, str(SCRIPTS))
    import fit_job
    train, val = fit_job.data(opts)
    model = fit_job.net(opts)
    history = gluondist.fit(model, train, val_data=val, epochs=epochs, batch_size=batch, seed=11,
                            optimizer_params=fit_job.optimizer_params(opts or {}), ctx=ctx)
    return params_of(model), history.history


def job_results(path, workers):
    """What each of fit_job.py's ``workers`` saved in ``path``: parameters, curves."""
    params = [dict(np.load(path / f"params.{r}.npz")) for r in range(workers)]
    histories = [curves(json.loads((path / f"history.{r}.json").read_text()))
                 for r in range(workers)]
    return params, histories


def kill_during_a_write(ckpt, marker, *args):
    """Run scripts/checkpoint_hang.py (its writer thread hangs halfway through a checkpoint
    and touches ``marker``), kill -9 it then; checks that the checkpoint before is whole and
    the killed write left one temporary directory beside it."""
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "checkpoint_hang.py"), str(ckpt),
                             str(marker), *args])
    try:
        wait_until(marker.exists, timeout=120, message="the checkpoint's write to begin")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    names = set(os.listdir(ckpt))
    assert "ckpt-000000" in names and len(names) == 2
    assert (names - {"ckpt-000000"}).pop().startswith(".ckpt-000001.")


OPT = {"learning_rate": 0.1, "momentum": 0.9}


@pytest.fixture
def small(digits):
    """400 training and 200 validation digits."""
    X, y = digits
    return (X[:400], y[:400]), (X[400:600], y[400:600])


def fit_mlp(data, epochs=2, net=None, **kw):
    """gluondist.fit with the tests' defaults (an MLP, batch 30, seed 7, SGD with momentum);
    returns ``(net, history)``."""
    import gluondist
    net = net or mlp()
    kw.setdefault("optimizer_params", OPT)
    h = gluondist.fit(net, data, epochs=epochs, batch_size=kw.pop("batch_size", 30),
                      seed=kw.pop("seed", 7), **kw)
    return net, h


E2E = HERE / "e2e"


def pytest_collection_modifyitems(items):
    """A test is slow by where it lives: every test under tests/e2e/ (real multi-process jobs,
    sshd, Slurm, namespaces, the site's build, fresh interpreters) and no other, so a slow
    test cannot land in a fast tier by a forgotten marker, nor a fast one wait in the slow
    group. The slow tests run first, in one xdist group: under ``--dist loadgroup``
    (pyproject's addopts) one worker runs them one after another, as alone (their jobs share
    two cores, and some their namespace links), while the others take the fast tests; so with
    pytest 8 (under pytest 9 xdist 3.8 appends no group to a test's id: see CONTRIBUTING)."""
    for item in items:
        if E2E in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)
        elif item.get_closest_marker("slow"):
            raise pytest.UsageError(f"{item.nodeid} is marked slow outside tests/e2e/: "
                                    f"move it to tests/e2e/, where every test is slow")
    slow = [item for item in items if item.get_closest_marker("slow")]
    for item in slow:
        item.add_marker(pytest.mark.xdist_group("slow"))
    items[:] = slow + [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture(scope="session", autouse=True)
def _font_list():
    """matplotlib lists the fonts with ``fc-list`` (a process) the first time it is imported
    on a machine, then keeps the list in its cache: done here, before any test, so that a unit
    test that draws a plot starts no process on a fresh machine either."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    """tests/unit/ is the pure tier: a test there that starts a process (subprocess, a fork)
    fails, naming the tier to move it to, instead of slowing the tier down unseen."""
    if HERE / "unit" not in Path(str(request.node.fspath)).parents:
        return

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} starts a process: tests/unit/ starts none "
                             "(move it to tests/launcher/, or tests/e2e/ for a job)")
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse)


@pytest.fixture
def fake(tmp_path):
    """The fake backend (fake_backend.py), registered for the test."""
    from fake_backend import Fake
    from gluondist.launcher import transports
    backend = Fake()
    transports.register(backend)
    yield backend
    transports.unregister(backend.name)
