"""A checkpoint being written is finished however the process is told to end: SIGTERM (the
launcher's teardown when another worker fails), Ctrl-C, or a script's own handler that exits.
A process of its own gets the signal mid-write."""
import signal
import subprocess
import sys

import pytest

# A Writer whose one write takes 1 s. ``then`` is what the main thread does once the write is
# under way: ``sleep`` (as a worker blocked on a failed peer), ``drain`` (as fit's end), or
# ``drained`` (drain first: the write is over before the signal). ``loop`` sets an event
# loop's wakeup fd first, as asyncio does; ``own`` installs a SIGTERM handler that exits 7.
# ``racing`` (``racing-int``): SIGTERM (SIGINT) comes while a second write's thread starts.
SCRIPT = """
import asyncio, pathlib, signal, sys, time
from gluondist.snapshot import Writer
setup, then = sys.argv[2], sys.argv[3]
if setup == "loop":
    loop = asyncio.new_event_loop()
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
if setup == "own":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))

class Slow:
    def write(self, directory):
        time.sleep(1.0)
        (pathlib.Path(directory) / "written").write_text("whole")

class Fast:
    def write(self, directory):
        pass

writer = Writer(sys.argv[1])
if then.startswith("racing"):  # the signal comes as the second write's thread is started
    import os, threading
    writer.submit(0, None, lambda spare: Fast())
    writer.writing().wait()
    start = threading.Thread.start
    def racing(thread):
        os.kill(os.getpid(), signal.SIGINT if then == "racing-int" else signal.SIGTERM)
        start(thread)
    threading.Thread.start = racing
    try:
        writer.submit(1, None, lambda spare: Slow())
    except KeyboardInterrupt:
        writer.drain()
        print("drained", flush=True)
    sys.exit(0)
writer.submit(0, None, lambda spare: Slow())
if then == "drained":
    writer.drain()
if then == "drain":
    try:  # before it says so: Ctrl-C cannot come before the try
        print("writing", flush=True)
        writer.drain()
    except KeyboardInterrupt:  # as fit's on_exception does after Ctrl-C
        print("interrupted", flush=True)
        writer.drain()
    print("drained", (pathlib.Path(sys.argv[1]) / "written").exists(), flush=True)
    sys.exit(0)
print("writing", flush=True)
time.sleep(30)
"""


def run(tmp_path, setup="plain", then="sleep", sig=signal.SIGTERM):
    """The exit code and output of the script, sent ``sig`` once it said it is writing."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), setup, then],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "writing\n"
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        return code, proc.stdout.read()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("then", ["sleep", "drain"])
def test_sigterm_mid_write_ends_the_process_once_the_write_is_complete(tmp_path, then):
    code, out = run(tmp_path, then=then)
    assert code == 128 + signal.SIGTERM
    assert (tmp_path / "written").read_text() == "whole"
    assert out == ""  # the main thread runs nothing past the signal (fit's return, say)


def test_ctrl_c_mid_write_still_lets_the_next_drain_wait_for_it(tmp_path):
    """Python 3.11 marks a thread ended when Ctrl-C interrupts a join; the Writer waits on
    an event of its own, which stays true."""
    code, out = run(tmp_path, then="drain", sig=signal.SIGINT)
    assert (code, out.splitlines()) == (0, ["interrupted", "drained True"])


def test_a_scripts_own_handler_that_exits_still_lets_the_write_end(tmp_path):
    code, _ = run(tmp_path, setup="own", then="drain")
    assert code == 7  # its handler, not ours
    assert (tmp_path / "written").read_text() == "whole"  # the exit waited for the write


@pytest.mark.parametrize("setup,then", [("plain", "drained"), ("loop", "sleep")])
def test_sigterm_is_left_at_its_default_once_drained_or_where_a_loop_watches(tmp_path, setup,
                                                                             then):
    code, _ = run(tmp_path, setup, then)
    assert code == -signal.SIGTERM
    # drained: written before the signal; a loop's fd set: the write dies with the process
    assert (tmp_path / "written").exists() == (then == "drained")


@pytest.mark.parametrize("sig,code,out", [("racing", 128 + signal.SIGTERM, ""),
                                          ("racing-int", 0, "drained\n")])
def test_a_signal_before_the_writers_thread_starts_ends_the_process_at_once(tmp_path, sig,
                                                                            code, out):
    """The write it interrupts never began; the one before it is complete."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), "plain", sig],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.splitlines()[-1:]) == (code, out.splitlines())
    assert not (tmp_path / "written").exists()
