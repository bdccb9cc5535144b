"""Tell the launcher that this worker is making progress: ``beat()`` once per finished batch.

``gluondist launch --stall-timeout S`` stops a job in which no worker progressed for S seconds
and shows where each worker is stuck. ``fit`` and the recipes call :func:`beat`; a hand-written
loop can too (a worker that never calls it is judged by its CPU time instead).

Outside such a launch ``beat`` returns at once (a global lookup). Under it, ``beat`` only adds
to a counter; a daemon thread, started by the first beat, writes the total to an inherited pipe
(``GLUONDIST_PROGRESS_FD``) when it changed, at most twice a second. No network, standard
library only, importable without MXNet.
"""
import os
import threading
import time

from . import envvars

INTERVAL = 0.5  # seconds between reports; the launcher's view of a worker lags by at most this

_fd = None
_count = 0
_thread = None


def _channel():
    value = os.environ.get(envvars.GLUONDIST_PROGRESS_FD)
    if not value:
        return None
    try:
        fd = int(value)
        os.set_blocking(fd, False)  # a full pipe drops a report, never blocks training
        return fd
    except (ValueError, OSError):
        return None


_fd = _channel()


def beat(batches: int = 1) -> None:
    """Report ``batches`` more finished training batches. Cheap enough for every batch."""
    global _count
    if _fd is None:
        return
    _count += batches
    if _thread is None:
        _start()


def _start() -> None:
    global _thread
    _thread = threading.Thread(target=_report, name="gluondist-heartbeat", daemon=True)
    _thread.start()


def _report() -> None:
    global _fd
    sent = None
    while _fd is not None:
        count = _count
        if count != sent:
            try:
                os.write(_fd, f"gluondist-progress {count}\n".encode())
                sent = count
            except BlockingIOError:
                pass  # the launcher is behind: the next report carries the total
            except OSError:  # the launcher is gone: stop reporting
                _fd = None
                return
        time.sleep(INTERVAL)
