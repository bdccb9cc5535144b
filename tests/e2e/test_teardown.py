"""The launcher's teardown holds against signals and interrupts, with real jobs: nothing a
signal does can orphan a process or skip the cleanup. Signals to the command and a second
Ctrl-C in a notebook, which need no MXNet, are tested fast in launcher/test_command.py."""
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from conftest import SCRIPTS, TAG, kill_tagged, role_alive, tagged_pids, wait_until

JOB = str(SCRIPTS / "job.py")


def test_sigterm_is_a_request_the_monitor_acts_on_and_the_cleanup_runs(launch, tmp_path):
    # Workers that ignore SIGTERM keep the teardown in its 5-s wait; more SIGTERMs and a
    # SIGHUP land there. The job still ends whole: everything stopped (the workers' children
    # in process groups of their own too), the error-record directory (under TMPDIR)
    # removed, exit 143.
    (tmp_path / "tmp").mkdir()
    job = launch("-n", 2, "-s", 1, "--log-dir", "logs", JOB, "stubborn", "all",
                 env={"TMPDIR": str(tmp_path / "tmp")})
    wait_until(lambda: len(list(tmp_path.glob("*.hanging"))) == 2, message="the job to run")
    wait_until(lambda: len(list(tmp_path.glob("*.grandchild"))) == 2, message="grandchildren")
    assert os.listdir(tmp_path / "tmp")  # the launcher's error-record directory
    job.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: not role_alive(job.tag, "server"), message="the teardown to begin")
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGTERM):
        job.proc.send_signal(sig)
    assert job.wait(timeout=60) == 143, job.err
    assert "gluondist: stopped scheduler, server 0, worker 0, worker 1" in job.err
    assert "terminated (SIGTERM)" in job.err and "Traceback" not in job.err
    assert os.listdir(tmp_path / "tmp") == []
    assert job.leftovers() == []


def test_an_interrupt_between_a_spawn_and_its_record_orphans_nothing(tmp_path, monkeypatch):
    # The interrupt arrives while worker 0 is started but not yet returned to the group: the
    # widest version of the window in which it used to leave that worker running unrecorded.
    from gluondist.launcher.options import LaunchOptions
    from gluondist.launcher.transports.local import LocalTransport
    from gluondist.launcher.supervisor import launch_job

    class InterruptedRightAfterSpawn(LocalTransport):
        def spawn(self, spec, progress=False, error_file=None):
            started = super().spawn(spec, progress, error_file)
            if spec.label == "worker 0":
                os.kill(os.getpid(), signal.SIGINT)
            return started

    tag = uuid.uuid4().hex
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(KeyboardInterrupt):
            launch_job(LaunchOptions((JOB, "hang", "all"), 2, 1, env={TAG: tag}),
                       lambda text, note: None, transport=InterruptedRightAfterSpawn())
        alive = tagged_pids(tag)
    finally:
        stray = kill_tagged(tag)
    assert alive == [] and stray == []


def test_a_process_that_cannot_die_is_named_and_the_launcher_still_exits(launch, tmp_path):
    # A worker blocked on a file system that never answers (a FUSE daemon of the test's own)
    # is in state D once signalled: not even SIGKILL ends it until the daemon goes.
    mnt, reading = tmp_path / "mnt", tmp_path / "reading"
    mnt.mkdir()
    daemon = subprocess.Popen([sys.executable, str(SCRIPTS / "fuse_hang.py"), mnt, reading],
                              stderr=subprocess.PIPE, text=True)
    job = None
    try:
        wait_until(lambda: os.path.ismount(mnt) or daemon.poll() is not None,
                   message="the FUSE mount")
        if daemon.poll() is not None:
            pytest.skip(f"cannot mount FUSE (needs root and /dev/fuse): {daemon.stderr.read()}")
        (tmp_path / "stuck.py").write_text(f"open({str(mnt / 'f')!r}).read()\n")
        job = launch("-n", 1, "-s", 1, "stuck.py")
        wait_until(reading.exists, message="the worker to block in its read")
        job.proc.send_signal(signal.SIGTERM)
        assert job.wait(timeout=60) == 143, job.err
        line = next(l for l in job.err.splitlines() if "after SIGKILL" in l)
        assert line.startswith("gluondist: worker 0 (pid ") and "did not die after SIGKILL, in state D (disk sleep)" in line
        assert "gluondist: stopped scheduler, server 0, worker 0" in job.err, job.err
        assert "gluondist: terminated (SIGTERM): left worker 0 behind" in job.err
    finally:
        daemon.kill()  # closing /dev/fuse aborts the connection: the worker can die now
        daemon.wait()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        if job is not None:
            wait_until(lambda: not tagged_pids(job.tag), message="the stuck worker to die")


@pytest.mark.parametrize("mode,code", [("raise", 1), ("exit", 4), ("hang", 1)])
def test_a_failing_worker_runs_its_atexit_handlers_and_flushes_its_files(launch, tmp_path,
                                                                         mode, code):
    # As `python SCRIPT.py` would, but bounded: a handler that hangs is cut off after
    # GLUONDIST_EXIT_GRACE (1 s here) and the worker still ends with its code, while
    # MXNet's exit barrier (the other worker is alive) is never entered.
    job = launch("-n", 2, "-s", 1, "--env", "GLUONDIST_EXIT_GRACE=1", SCRIPTS / "exit_job.py",
                 mode)
    assert job.wait(timeout=90) == code, job.err
    assert f"worker 1 failed first: exit code {code}" in job.err
    assert (tmp_path / "atexit.1").read_text() == "ran"
    assert (tmp_path / "buffered.1").read_text() == "buffered"
    assert job.leftovers() == []


def test_a_handler_that_holds_the_interpreter_is_ended_by_the_alarm(tmp_path):
    # The grace's timer thread cannot run while the main thread holds the GIL in C code (a
    # catastrophic regex here): SIGALRM's default action ends the process 3 s after the grace.
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent("""\
        import atexit, re
        atexit.register(lambda: re.match(r"(a+)+$", "a" * 64 + "b"))
        raise RuntimeError("failed")
    """))
    env = dict(os.environ, GLUONDIST_EXIT_GRACE="1")
    proc = subprocess.run([sys.executable, "-m", "gluondist.launcher.child.bootstrap", str(script)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGALRM, proc.stderr
    assert "RuntimeError: failed" in proc.stderr


def test_an_interrupt_in_the_wait_does_not_cut_the_work_short():
    # The signal goes to the main thread itself, so it lands in the wait's system call: on
    # Python 3.11, Thread.join then marks the thread stopped (bpo-45274) and a second join
    # returned before the work was done (the teardown's processes were still alive).
    import threading
    import time

    from gluondist.launcher.process import to_the_end
    finished, hurried = [], threading.Event()

    def work():
        time.sleep(1.0)
        finished.append(hurried.is_set())

    threading.Timer(0.2, signal.pthread_kill, (threading.get_ident(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        to_the_end(work, hurried)
    assert finished == [True]  # done, and told to hurry, before the interrupt was raised
