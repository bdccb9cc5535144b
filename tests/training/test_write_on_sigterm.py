"""SIGTERM (the launcher's teardown when another worker fails) lets worker 0 finish the
checkpoint it is writing: a process of its own gets the signal mid-write."""
import signal
import subprocess
import sys

import pytest

# A Writer whose one write takes 1 s; the main thread then waits as a worker blocked on a
# failed peer would. ``loop`` sets an event loop's wakeup fd first, as asyncio does.
SCRIPT = """
import asyncio, pathlib, sys, time
from gluondist.snapshot import Writer
if sys.argv[2] == "loop":
    loop = asyncio.new_event_loop()
    loop.add_signal_handler(10, lambda: None)  # SIGUSR1's: the loop's wakeup fd is set

class Slow:
    def write(self, directory):
        time.sleep(1.0)
        (pathlib.Path(directory) / "written").write_text("whole")

writer = Writer(sys.argv[1])
writer.submit(0, None, lambda spare: Slow())
if sys.argv[3] == "drained":
    writer.drain()
print("writing", flush=True)
time.sleep(30)
"""


def run(tmp_path, mode="plain", when="writing"):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), mode, when],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "writing\n"
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_mid_write_ends_the_process_once_the_write_is_complete(tmp_path):
    code = run(tmp_path)
    assert code == 128 + signal.SIGTERM
    assert (tmp_path / "written").read_text() == "whole"


@pytest.mark.parametrize("mode,when", [("plain", "drained"), ("loop", "writing")])
def test_sigterm_is_left_at_its_default_once_drained_or_where_a_loop_watches(tmp_path, mode,
                                                                             when):
    code = run(tmp_path, mode, when)
    assert code == -signal.SIGTERM
    # drained: written before the signal; a loop's fd set: the write dies with the process
    assert (tmp_path / "written").exists() == (when == "drained")
