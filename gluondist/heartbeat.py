"""Tell the launcher that this worker is making progress: ``beat()`` once per finished batch.

``gluondist launch --stall-timeout S`` stops a job in which no worker progressed for S seconds
and shows where each worker is stuck. ``fit`` and the recipes call :func:`beat`; a hand-written
loop can too (a worker that never calls it is judged by its CPU time instead).

Outside such a launch ``beat`` returns at once (one attribute read). Under it, ``beat`` only adds
to a counter; a daemon thread, started by the first beat, writes the total to an inherited pipe
(``GLUONDIST_PROGRESS_FD``) when it changed, at most twice a second. No network, standard
library only, importable without MXNet.
"""
import os
import threading
import time

from . import envvars, wire

INTERVAL = 0.5  # seconds between reports; the launcher's view of a worker lags by at most this

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


class _Reporter:
    """This process's channel to the launcher (None outside a launch, or once the launcher
    is gone), the batches counted so far and the thread that reports them."""

    def __init__(self, fd):
        self.fd, self.count, self.thread = fd, 0, None

    def report(self) -> None:
        sent = None
        while self.fd is not None:
            count = self.count
            if count != sent:
                try:
                    os.write(self.fd, (wire.encode(wire.Progress(count)) + "\n").encode())
                    sent = count
                except BlockingIOError:
                    pass  # the launcher is behind: the next report carries the total
                except OSError:  # the launcher is gone: stop reporting
                    self.fd = None
                    return
            time.sleep(INTERVAL)


_REPORTER = _Reporter(_channel())


def beat(batches: int = 1) -> None:
    """Report ``batches`` more finished training batches. Cheap enough for every batch."""
    reporter = _REPORTER
    if reporter.fd is None:
        return
    reporter.count += batches
    if reporter.thread is None:
        reporter.thread = threading.Thread(target=reporter.report, name="gluondist-heartbeat",
                                           daemon=True)
        reporter.thread.start()
