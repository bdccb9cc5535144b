"""gluondist.heartbeat: a near no-op outside a launch with stall detection, a pipe inside."""
import os
import subprocess
import sys

BEATS = ("import sys, time; from gluondist import heartbeat\n"
         "for _ in range(int(sys.argv[1])): heartbeat.beat()\n"
         "time.sleep(float(sys.argv[2]))\n")


def test_outside_a_launch_beat_starts_nothing():
    from gluondist import heartbeat
    if heartbeat._REPORTER.fd is not None:  # this test process was itself launched with one
        return
    for _ in range(1000):
        heartbeat.beat()
    assert heartbeat._REPORTER.thread is None and heartbeat._REPORTER.count == 0


def test_under_a_launch_the_total_arrives_on_the_pipe():
    read, write = os.pipe()
    env = {**os.environ, "GLUONDIST_PROGRESS_FD": str(write)}
    proc = subprocess.Popen([sys.executable, "-c", BEATS, "1000", "1.5"], env=env,
                            pass_fds=(write,))
    os.close(write)
    lines = []
    try:
        with os.fdopen(read, "rb") as stream:
            for raw in stream:
                lines.append(raw.decode().strip())
    finally:
        proc.wait(timeout=30)
    assert lines and lines[-1] == "gluondist-progress 1000", lines
    assert len(lines) <= 4  # at most one report per 0.5 s, only when the count changed


def test_a_closed_channel_never_stops_training():
    read, write = os.pipe()
    os.close(read)  # the launcher is gone
    env = {**os.environ, "GLUONDIST_PROGRESS_FD": str(write)}
    proc = subprocess.run([sys.executable, "-c", BEATS, "10", "1"], env=env, pass_fds=(write,),
                          capture_output=True, text=True, timeout=60)
    os.close(write)
    assert proc.returncode == 0, proc.stderr
