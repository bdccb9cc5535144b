"""docs/index.md's install commands, as they are, in a fresh virtual environment made from a
copy of the checkout (what git tracks, and the files not yet committed): from the checkout,
then from the wheel the project builds. Needs the package index (MXNet, build)."""
import os
import shutil
import subprocess
import sys

import docpages
from conftest import ROOT


def checkout_copy(dest):
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def run(command, cwd, venv, timeout=900):
    """``command`` through bash, as a user of the activated ``venv`` types it."""
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv}/bin:{os.environ['PATH']}"}
    for name in ("PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_install_commands_work_in_a_fresh_environment(tmp_path):
    repo = checkout_copy(tmp_path / "gluondist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    elsewhere = tmp_path / "elsewhere"  # not the checkout, whose gluondist/ would shadow
    elsewhere.mkdir()
    where = f"{venv}/bin/python -c 'import gluondist; print(gluondist.__file__)'"

    for command in docpages.commands(docpages.block("docs/index.md", "pip install '.[cpu]'")):
        run(command, repo, venv)
    env = run("gluondist env", elsewhere, venv)
    assert "DIST_KVSTORE=yes" in env and "mxnet      1.9.1" in env
    assert run(where, elsewhere, venv).startswith(str(venv))

    run("pip uninstall -y gluondist", elsewhere, venv)
    for command in docpages.commands(docpages.block("docs/index.md", "pip install build")):
        run(command, repo, venv)
    assert run(where, elsewhere, venv).startswith(str(venv))
    assert "DIST_KVSTORE=yes" in run("gluondist env", elsewhere, venv)


def test_the_base_package_installs_without_mxnet_and_says_what_to_add(tmp_path):
    """The `pip install .` line (your own MXNet): no MXNet comes with it, and `gluondist env`
    says how to add one."""
    repo = checkout_copy(tmp_path / "gluondist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    lines = docpages.commands(docpages.block("docs/index.md", "pip install '.[cu117]'"))
    run(next(line for line in lines if line == "pip install ."), repo, venv)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(f"{venv}/bin/python -c 'import gluondist, click, numpy, tqdm'", elsewhere, venv)
    env = {**os.environ, "PATH": f"{venv}/bin:{os.environ['PATH']}"}
    proc = subprocess.run(["gluondist", "env"], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "MXNet does not import" in proc.stderr, proc.stderr
    assert "pip install '.[cpu]'" in proc.stderr  # the hint names the checkout's form
