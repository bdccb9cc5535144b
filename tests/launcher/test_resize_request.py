"""A grow request (gluondist.elastic.SIGNAL, SIGUSR2) never kills a worker that has just
started (issue 36, defect 8: exit 140, SIGUSR2's default action, when it came before the
handler). A worker is started with the signal held, a held signal stays pending across exec,
and the bootstrap takes it once its handler is in place: the request is kept as the flag that
``gluondist.elastic.requested()`` reads. Each test sends the request provably before the
bootstrap runs: a ``sitecustomize`` (which Python imports before ``-m``'s module) waits until
the kernel lists the signal as pending for the process."""
import json
import os
import signal
import subprocess
import sys
import textwrap

from gluondist import elastic
from gluondist.launcher.child import BOOTSTRAP, remote
from gluondist.launcher.plan import ProcessSpec
from gluondist.launcher.transports.local import LocalTransport
from conftest import wait_until

SCRIPT = "import gluondist.elastic as e; print('requested', e.requested(), flush=True)\n"
# writes `started`, then waits (up to 60 s) until SIGUSR2 is pending for this process
WAIT_FOR_PENDING = textwrap.dedent(f"""\
    import os, time
    open(os.environ["STARTED"], "w").close()
    def pending():
        with open("/proc/self/status") as f:
            fields = dict(l.split(":", 1) for l in f)
        return any(int(fields[k], 16) >> ({int(elastic.SIGNAL)} - 1) & 1
                   for k in ("SigPnd", "ShdPnd"))
    deadline = time.monotonic() + 60
    while not pending() and time.monotonic() < deadline:
        time.sleep(0.01)
""")


def _files(tmp_path):
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "sitecustomize.py").write_text(WAIT_FOR_PENDING)
    (tmp_path / "job.py").write_text(SCRIPT)
    return {"PYTHONPATH": str(tmp_path / "early"), "STARTED": str(tmp_path / "started")}


def test_a_request_before_the_bootstrap_runs_is_kept_for_the_script(tmp_path):
    env = {**os.environ, **_files(tmp_path)}
    # as the launcher starts a worker: the signal held in the starting thread, so inherited
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {elastic.SIGNAL})
    try:
        proc = subprocess.Popen([sys.executable, "-m", BOOTSTRAP, str(tmp_path / "job.py")],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    try:
        wait_until(lambda: (tmp_path / "started").exists(), 60)
        os.kill(proc.pid, elastic.SIGNAL)  # the bootstrap has not run yet
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    assert out.decode() == "requested True\n"


def test_the_ssh_remote_side_starts_a_worker_with_the_request_held(tmp_path):
    job = {"protocol": remote.PROTOCOL, "env": _files(tmp_path), "cwd": str(tmp_path),
           "worker": True, "progress": False, "silence": None,
           "argv": [sys.executable, "-m", BOOTSTRAP, "job.py"]}
    proc = subprocess.Popen([sys.executable, "-m", "gluondist.launcher.child.remote"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.flush()
        wait_until(lambda: (tmp_path / "started").exists(), 60)
        proc.stdin.write(b"resize\n")  # the launcher's request, relayed as the signal
        proc.stdin.flush()
        out = proc.stdout.readline()
        code = proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert out == b"requested True\n", err.decode()
    assert code == 0 and err.decode().splitlines()[-1] == "gluondist-exit 0"


def test_a_local_worker_asked_to_grow_at_once_after_its_start_keeps_the_request(tmp_path):
    # issue 36, defect 8: the request comes before the bootstrap has its handler (a
    # sitecustomize holds the start until the kernel lists the signal pending); the worker
    # was started with the signal held, so it is kept, not SIGUSR2's default action (death)
    env = _files(tmp_path)
    spec = ProcessSpec("worker", 0, "127.0.0.1",
                       (sys.executable, "-m", BOOTSTRAP, str(tmp_path / "job.py")), env)
    proc, _ = LocalTransport().spawn(spec)
    try:
        LocalTransport().request_resize(proc)  # at once, from the launcher's side
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, out) == (0, b"requested True\n")
