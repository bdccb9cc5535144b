"""A background thread that runs fit's data pipeline a few batches ahead of the step."""
from __future__ import annotations

import queue
import threading

PUT_TICK = 0.1  # seconds a full queue's put waits before the thread looks at the stop flag
STOP_WAIT = 1.0  # seconds close() waits for the thread (a daemon: it may be left behind)


class Prefetcher:
    """Runs an iterator in a background thread, at most ``depth`` items ahead. Its exceptions
    are raised where the item would have been; closing (or leaving the loop) stops it."""

    def __init__(self, iterator, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(iterator,), daemon=True,
                                        name="gluondist-prefetch")
        self._thread.start()

    def _run(self, iterator):
        try:
            for item in iterator:
                if not self._put((True, item)):
                    return
            self._put((False, None))
        except BaseException as exc:  # handed to the consumer, raised there with its traceback
            self._put((None, exc))

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=PUT_TICK)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self):
        try:
            while True:
                ok, item = self._queue.get()
                if ok is None:
                    raise item
                if not ok:
                    return
                yield item
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        # A thread blocked in a slow source sees the flag at its next item; it is a daemon, so
        # waiting a moment is enough (an error in training must not wait for the data).
        self._thread.join(timeout=STOP_WAIT)
