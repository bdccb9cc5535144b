"""The command, fast: `gluondist launch` (scripts/fake_cli.py: gluondist's CLI with the fake
backend of fake_backend.py registered) stopped by SIGINT, SIGTERM or SIGHUP, killed with SIGKILL,
or with a console that cannot take a worker's line, and ``gluondist.launch()`` in a notebook's
kernel given a second Ctrl-C during its teardown, and the wait that keeps an interrupt from
cutting that teardown short. Their processes are tiny real ones without MXNet; nothing of a job
may outlive it. A real job stopped by signals is in e2e/test_teardown.py."""
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import HERE, SCRIPTS, TAG, kill_tagged, role_alive, tagged_pids, wait_until

WORKER = str(SCRIPTS / "fake_worker.py")


@pytest.fixture
def fake_cli(tmp_path):
    """Start `gluondist launch --launcher fake -H h1:1,h2:1 ARGS` in tmp_path (with ``env``
    added to this environment; ``closed``: with its stdout closed); every process of it is
    killed and checked at the end."""
    started = []

    def start(*args, env=None, closed=False):
        tag = uuid.uuid4().hex
        shell = ["sh", "-c", 'exec "$@" >&-', "sh"] if closed else []
        proc = subprocess.Popen(
            [*shell, sys.executable, str(SCRIPTS / "fake_cli.py"), "launch", "--launcher",
             "fake", "-H", "h1:1,h2:1", "--env", f"{TAG}={tag}", "--env", f"FAKE_DIR={tmp_path}",
             *map(str, args)], cwd=tmp_path, env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        started.append((proc, tag))
        return proc, tag
    yield start
    for proc, tag in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        assert kill_tagged(tag) == [], "processes of the job outlived the test"


def left_after(tag, timeout):
    """The job's processes still alive once ``timeout`` has passed (normally none at once)."""
    deadline = time.monotonic() + timeout
    while tagged_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    return tagged_pids(tag)


@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"),
                                           (signal.SIGTERM, 143, "SIGTERM"),
                                           (signal.SIGHUP, 129, "SIGHUP")])
def test_signals_to_the_launcher_stop_the_job(tmp_path, fake_cli, sig, code, name):
    proc, tag = fake_cli("-n", 2, "-s", 1, WORKER, "hang", "0,1")
    wait_until(lambda: len(list(tmp_path.glob("*.hanging"))) == 2 or proc.poll() is not None,
               timeout=60, message="the job to run")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"interrupted ({name})" in err or f"terminated ({name})" in err
    assert "gluondist: stopped scheduler, server 0, worker 0, worker 1" in err
    assert left_after(tag, 10) == []


def test_sigkill_to_the_launcher_still_ends_its_children(tmp_path, fake_cli):
    # the workers' own children too, though in process groups of their own
    proc, tag = fake_cli("-n", 2, "-s", 1, WORKER, "stubborn", "0,1")
    wait_until(lambda: len(list(tmp_path.glob("*.grandchild"))) == 2 or proc.poll() is not None,
               timeout=60, message="the job to run")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert left_after(tag, 10) == []


@pytest.mark.parametrize("console", ["ascii", "closed"])
def test_a_console_that_cannot_take_a_line_drops_it_and_the_job_goes_on(tmp_path, fake_cli,
                                                                         console):
    # PYTHONIOENCODING=ascii cannot encode the worker's lines; `>&-` leaves no stdout at all.
    # Either used to kill the reader thread: the worker then blocked on its full pipe.
    proc, tag = fake_cli("-n", 2, "-s", 1, "--log-dir", "logs", WORKER, "unicode", "1",
                         env={"PYTHONIOENCODING": "ascii"} if console == "ascii" else None,
                         closed=console == "closed")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert err.count("gluondist: the console cannot take an output line") == 1, err
    if console == "ascii":
        assert "[worker 1] unicode done" in out  # the lines after the bad ones still show
        assert "[worker 0] worker 0 running unicode" in out
    log = (tmp_path / "logs" / "worker.1.log").read_text()
    assert log.count("ünïcödé ✓") == 3000 and "unicode done" in log
    assert len(list(tmp_path.glob("*/done.*"))) == 2  # both workers finished (fake_node.py)
    assert left_after(tag, 10) == []


NOTEBOOK = """
import sys, time
sys.path.insert(0, sys.argv[1])
import gluondist
from fake_backend import Fake
from gluondist.launcher import transports
transports.register(Fake())
try:
    gluondist.launch(sys.argv[2], "stubborn", "0,1", num_workers=2, num_servers=1,
                     launcher="fake", hosts="h1:1,h2:1",
                     env={sys.argv[3]: sys.argv[4], "FAKE_DIR": sys.argv[5]})
except KeyboardInterrupt:
    open("raised", "w").close()
    time.sleep(600)  # a notebook's kernel lives on after the cell
"""


def test_a_second_ctrl_c_during_launchs_teardown_leaks_nothing(tmp_path):
    tag = uuid.uuid4().hex
    kernel = subprocess.Popen([sys.executable, "-c", NOTEBOOK, str(HERE), WORKER, TAG, tag,
                               str(tmp_path)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        wait_until(lambda: len(list(tmp_path.glob("*.hanging"))) == 2 or
                   kernel.poll() is not None, message="the job")
        kernel.send_signal(signal.SIGINT)
        wait_until(lambda: not role_alive(tag, "server"), message="the teardown to begin")
        assert role_alive(tag, "worker")  # waiting for the workers that ignore SIGTERM
        kernel.send_signal(signal.SIGINT)
        wait_until(lambda: (tmp_path / "raised").exists() or kernel.poll() is not None,
                   message="launch() to raise")
        assert kernel.poll() is None, kernel.stderr.read().decode()
        alive = tagged_pids(tag)  # while the kernel lives on
    finally:
        kernel.kill()
        kernel.wait()
        stray = kill_tagged(tag)
    assert alive == [] and stray == []
    # and it still says what it stopped (the second interrupt used to skip that line)
    assert "gluondist: stopped scheduler, server 0, worker 0, worker 1" in \
        kernel.stderr.read().decode()


def test_an_interrupt_while_the_teardowns_thread_starts_waits_for_the_teardown():
    # The notebook test above failed once under load, its stubborn workers alive after
    # launch() raised: Python raises an interrupt at its next check between bytecodes, and
    # Thread.start() has such checks once the thread exists. The second Ctrl-C, landing there
    # while a loaded machine held the kernel's main thread, left the wait before it began, and
    # the teardown ran on without being told to hurry. Here the work interrupts at once, from
    # its own thread, while the main thread is still starting it.
    from gluondist.launcher.process import to_the_end
    finished, hurried = [], threading.Event()

    def work():
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(0.3)
        finished.append(hurried.is_set())

    with pytest.raises(KeyboardInterrupt):
        to_the_end(work, hurried)
    assert finished == [True]  # done, and told to hurry, before the interrupt was raised
