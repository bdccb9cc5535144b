"""`gluondist env`: what this machine's build can do, and the install command where MXNet is
missing."""
from conftest import run_cli
from gluondist import INSTALL_HINT


def test_env_reports_the_build():
    proc = run_cli("env")
    assert proc.returncode == 0, proc.stderr
    assert "mxnet      1.9.1" in proc.stdout and "DIST_KVSTORE=yes" in proc.stdout
    assert "gpus       0" in proc.stdout


def test_env_without_mxnet_names_the_install_command(tmp_path):
    # A package named mxnet that fails to import, first on the path: what a broken install does.
    (tmp_path / "mxnet").mkdir()
    (tmp_path / "mxnet" / "__init__.py").write_text("raise ImportError('libmxnet.so missing')\n")
    proc = run_cli("env", env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"gluondist: error: MXNet does not import (libmxnet.so missing); install it: "
        f"{INSTALL_HINT}")
