"""`gluondist env`: what this machine's build can do, and the install command where MXNet is
missing."""
import os
import subprocess
import sys

from click.testing import CliRunner

from conftest import run_cli
from gluondist import INSTALL_HINT
from gluondist.cli import cli


def test_env_reports_the_build():
    # in this process, whose mxnet is imported already (a subprocess imports it again: 2.5 s)
    out = CliRunner().invoke(cli, ["env"])
    assert out.exit_code == 0, out.output
    assert "mxnet      1.9.1" in out.output and "DIST_KVSTORE=yes" in out.output
    assert "gpus       0" in out.output


def test_env_without_mxnet_names_the_install_command(tmp_path):
    # A package named mxnet that fails to import, first on the path: what a broken install does.
    (tmp_path / "mxnet").mkdir()
    (tmp_path / "mxnet" / "__init__.py").write_text("raise ImportError('libmxnet.so missing')\n")
    proc = run_cli("env", env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"gluondist: error: MXNet does not import (libmxnet.so missing); install it: "
        f"{INSTALL_HINT}")


STUB = ('__version__ = "2.0.0"\n'
        "class _Features:\n    def is_enabled(self, name):\n        return True\n"
        "class runtime:\n    Features = _Features\n"
        "class context:\n    num_gpus = staticmethod(lambda: 0)\n")
WRONG = (f"gluondist is tested with MXNet 1.9, not MXNet 2.0.0: install it ({INSTALL_HINT}), "
         "or set GLUONDIST_UNTESTED_MXNET=1 to run this one untested")


def test_another_mxnet_version_is_refused_in_one_line(tmp_path):
    """An MXNet whose private names gluondist was not written against (2.0 renames
    Trainer._contexts): `gluondist env` says so, and training refuses to import."""
    (tmp_path / "mxnet").mkdir()
    (tmp_path / "mxnet" / "__init__.py").write_text(STUB)
    env = {"PYTHONPATH": str(tmp_path)}
    proc = run_cli("env", env=env)
    assert proc.returncode == 1 and "mxnet      2.0.0" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == f"gluondist: error: {WRONG}"
    training = subprocess.run([sys.executable, "-c", "import gluondist.kvstore"],
                              capture_output=True, text=True, env={**os.environ, **env})
    assert training.returncode == 1
    assert training.stderr.strip().splitlines()[-1] == f"ImportError: {WRONG}"
    assert "untested" not in proc.stdout  # refused, not also warned about
    # the override: a warning, and on
    env["GLUONDIST_UNTESTED_MXNET"] = "1"
    proc = run_cli("env", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "warning    MXNet 2.0.0 is untested with gluondist (tested: 1.9)" in proc.stdout


def test_a_workers_script_of_plain_mxnet_is_refused_on_another_version(tmp_path):
    """The worker's bootstrap (what `gluondist launch` runs each worker in) reads MXNet's
    internals at exit, so it checks the version before the script, gluondist or not: read from
    libinfo.py as the servers read it, without importing mxnet."""
    (tmp_path / "mxnet").mkdir()
    (tmp_path / "mxnet" / "libinfo.py").write_text('__version__ = "1.8.0"\n')
    (tmp_path / "mxnet" / "__init__.py").write_text("from .libinfo import __version__\n")
    (tmp_path / "train.py").write_text("import mxnet\nprint('trained on', mxnet.__version__)\n")
    bootstrap = [sys.executable, "-m", "gluondist.launcher.child.bootstrap", "train.py"]
    run = lambda **env: subprocess.run(bootstrap, cwd=tmp_path, capture_output=True, text=True,
                                       env={**os.environ, **env})
    refused = run()
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "ImportError: " + WRONG.replace("2.0.0", "1.8.0")]
    allowed = run(GLUONDIST_UNTESTED_MXNET="1")
    assert allowed.returncode == 0 and allowed.stdout == "trained on 1.8.0\n", allowed.stderr


def test_a_server_or_scheduler_refuses_another_mxnet_version(tmp_path):
    """The servers do not import gluondist's training side: they read MXNet's libinfo.py and
    load its library themselves. A libinfo of 1.8.0 (the real library) is refused in one line;
    with the override the scheduler goes on, with a warning, to its next check (its port is
    taken here, so it ends there instead of waiting for a job)."""
    import importlib.util
    import socket
    from gluondist import wire
    real = os.path.join(os.path.dirname(importlib.util.find_spec("mxnet").origin), "libinfo.py")
    (tmp_path / "mxnet").mkdir()
    (tmp_path / "mxnet" / "libinfo.py").write_text(
        open(real).read().replace('__version__ = "1.9.1"', '__version__ = "1.8.0"'))
    (tmp_path / "mxnet" / "__init__.py").write_text("")
    for name in os.listdir(os.path.dirname(real)):  # the library and those beside it it loads
        if name.endswith(".so") or ".so." in name:
            (tmp_path / "mxnet" / name).symlink_to(os.path.join(os.path.dirname(real), name))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "DMLC_PS_ROOT_URI": "127.0.0.1",
           "DMLC_PS_ROOT_PORT": str(taken.getsockname()[1])}
    run = lambda role, **more: subprocess.run(
        [sys.executable, "-m", "gluondist.launcher.child.server"], capture_output=True,
        text=True, timeout=120, env={**env, "DMLC_ROLE": role, **more})
    try:
        for role in ("server", "scheduler"):
            refused = run(role)
            assert refused.returncode == 1
            assert refused.stderr.splitlines() == [
                f"gluondist {role}: " + WRONG.replace("2.0.0", "1.8.0") + "; stopping"]
        allowed = run("scheduler", GLUONDIST_UNTESTED_MXNET="1")
        assert allowed.returncode == wire.PORT_TAKEN
        assert allowed.stderr.splitlines()[0] == (
            "gluondist: warning: MXNet 1.8.0 is untested with gluondist (tested: 1.9); "
            "GLUONDIST_UNTESTED_MXNET=1 runs it anyway")
    finally:
        taken.close()
