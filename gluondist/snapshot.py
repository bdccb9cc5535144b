"""Writing checkpoints (the layout is :mod:`gluondist.checkpoint`'s): a :class:`Snapshot` of
host copies taken at one step, written atomically, and the :class:`Writer` that writes them in
a thread while training goes on.

:meth:`Snapshot.take` only queues copies in MXNet's engine, ordered before the next step's
writes to the same arrays, so the step after it trains at once; the copies are what a write
reads. A write goes into ``.ckpt-000007.<pid>.tmp/``, every file flushed to disk, then the
directory is renamed into place: a process killed at any moment leaves every earlier
checkpoint intact.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import signal
import socket
import threading
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from . import _mx
from ._mx import mx
from .kv.updates import updates_of

log = logging.getLogger(__name__)

KEEP = 2  # the newest checkpoints kept; older ones are removed after each write
PARAMS, STATES, STATE, RUN = "net.params", "trainer.states", "state.json", "run.json"
CALLBACKS = "callbacks.params"
_NAME = re.compile(r"^ckpt-(\d{6,})$")


class Snapshot:
    """What one checkpoint holds, as host copies: ``params`` (as ``net.save_parameters``
    writes them), the optimizer's arrays and its part of state.json (``optimizer``, None when
    the servers hold it), the callbacks' arrays, and state.json's text (``state``: a dict
    turned into text when taken, so later changes to the run do not reach it), of the end of
    ``epoch`` (0-based) or, with ``batch``, of its first ``batch`` batches."""

    def __init__(self, epoch: int, batch: Optional[int], params: dict,
                 optimizer: Optional[dict], arrays: dict, callback_arrays: dict, state: dict):
        self.epoch, self.batch, self.params, self.optimizer = epoch, batch, params, optimizer
        self.arrays, self.callback_arrays = arrays, callback_arrays
        self.state = json.dumps({**state, "optimizer": optimizer})
        # the run's epoch count when the writer is to refuse non-finite parameters (fit's
        # terminate_on_nan at a step checkpoint: checked on these copies, off the training
        # thread); None: not checked here
        self.finite_of: Optional[int] = None

    @classmethod
    def take(cls, epoch: int, batch: Optional[int], net, trainer, state: dict,
             callback_arrays: Optional[dict] = None,
             spare: Optional["Snapshot"] = None) -> "Snapshot":
        """Copies of ``net``'s parameters (of each one's first device copy: at a checkpoint
        every copy is equal, the trained ones by the step, the others by fit's average), of
        ``trainer``'s optimizer state (None: the servers hold it, as in ``dist_async``) and of
        ``callback_arrays``, on the CPU. ``spare``: a snapshot already written, whose arrays
        are copied into where names and shapes match: a copy into memory already mapped is
        about 10 times faster than one into new pages (0.03 s against 0.3 s for 128 MB here)."""
        reuse = _Reuse(spare)
        params = {name: reuse(("p", name), p.list_data()[0]) if _mx.storage(p)[0] == "default"
                  else _mx.whole_value(p) for name, p in _mx.named_parameters(net).items()}
        arrays: Dict[str, "mx.nd.NDArray"] = {}
        optimizer = _optimizer(trainer, arrays, reuse) if trainer is not None else None
        copies = {k: reuse(("c", k), a) for k, a in (callback_arrays or {}).items()}
        return cls(epoch, batch, params, optimizer, arrays, copies, state)

    @property
    def where(self) -> str:
        return where(self.epoch, self.batch)

    def write(self, directory) -> Path:
        """Write it as the next checkpoint of ``directory``, prune the old ones; returns its
        directory. OSError names what went wrong in one line (a full disk, say)."""
        directory = Path(directory)
        if self.finite_of is not None:
            bad = [name for name, a in self.params.items()
                   if not np.isfinite(a.asnumpy()).all()]
            if bad:
                raise FloatingPointError(not_finite(bad, self.epoch, self.finite_of, self.batch))
        final = directory / f"ckpt-{next_number(directory):06d}"
        tmp = directory / f".{final.name}.{os.getpid()}.tmp"
        try:
            self._files(tmp)
        except (OSError, mx.base.MXNetError) as exc:  # a full disk, a quota, an I/O error
            reason = _reason(exc, directory)  # before the partial files free their space
            shutil.rmtree(tmp, ignore_errors=True)
            after = f", batch {self.batch}" if self.batch else ""
            raise OSError(f"cannot write the checkpoint of epoch {self.epoch + 1}{after} to "
                          f"{directory}: "
                          f"{reason}; the earlier checkpoints are kept") from exc
        os.rename(tmp, final)
        fsync(directory)
        for stray in directory.glob(".ckpt-*.tmp"):  # left by a writer killed mid-write
            shutil.rmtree(stray, ignore_errors=True)
        for old in numbers(directory)[:-KEEP]:
            shutil.rmtree(directory / f"ckpt-{old:06d}", ignore_errors=True)
        return final

    def _files(self, tmp: Path) -> None:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        mx.nd.save(str(tmp / PARAMS), self.params)
        if self.arrays:
            mx.nd.save(str(tmp / STATES), self.arrays)
        if self.callback_arrays:
            mx.nd.save(str(tmp / CALLBACKS), self.callback_arrays)
        with open(tmp / STATE, "w") as f:
            f.write(self.state)
        for path in tmp.iterdir():
            fsync(path)
        fsync(tmp)


class Writer:
    """Writes snapshots to ``directory``, at most one at a time, in a thread of its own.

    :meth:`submit` waits for the write before it if that one is still running, and says so
    once per Writer, with what would help, unless one of the two is an epoch's end and the
    other a step checkpoint (one falls a few steps before or after an epoch's end, which a
    larger ``checkpoint_every`` does not avoid); a write that failed is raised by the next
    :meth:`raise_failed`, :meth:`submit` or :meth:`drain`, never lost. The thread is not a
    daemon: a process that ends normally finishes its last write first, and one told to end
    by SIGTERM does too (:class:`_FinishOnTerm`, until :meth:`drain`). Waits are on an event
    the write sets, not ``Thread.join``: Python 3.11 marks a thread ended when Ctrl-C (or any
    signal handler's exception) interrupts a join, and would then neither wait for it again
    nor at exit."""

    def __init__(self, directory):
        self.directory = directory
        self._guard: Optional[_FinishOnTerm] = None
        self._done: Optional[threading.Event] = None  # set when the write in flight ends
        self._error: Optional[BaseException] = None
        self._said = False
        self._step_in_flight = False  # the write in flight is a step checkpoint's
        self._written: Optional[Snapshot] = None  # the last snapshot written, for its arrays

    def writing(self) -> Optional[threading.Event]:
        """The event of the write in flight, or of the last one (None: none yet)."""
        return self._done

    def submit(self, epoch: int, batch: Optional[int], take) -> None:
        """Write ``take(spare)``, the Snapshot of ``epoch`` (and ``batch``), once the write
        before it is complete; ``spare`` is that one's snapshot, whose arrays ``take`` may
        copy into (see :meth:`Snapshot.take`)."""
        if self._done is not None and not self._done.is_set():
            step = batch is not None
            if not self._said and step == self._step_in_flight:  # not across an epoch's end
                self._said = True
                log.warning("fit: the checkpoint of %s waits for the one before it, still being "
                            "written (%s)", where(epoch, batch),
                            "writes take longer than the steps between checkpoints: raise "
                            "checkpoint_every" if step else
                            "writes take longer than an epoch: fit waits for each")
            self._done.wait()
        self.raise_failed()
        snapshot = take(self._written)
        self._written = None  # its arrays are the new snapshot's now
        self._step_in_flight = batch is not None
        # the event is the write's once its thread runs: a signal before that finds the last
        # one's (set), never one that no thread will set
        done = threading.Event()
        threading.Thread(target=self._write, args=(snapshot, done),
                         name="gluondist-checkpoint").start()
        self._done = done
        if self._guard is None:
            self._guard = _FinishOnTerm.install(self.writing)

    def _write(self, snapshot: Snapshot, done: threading.Event) -> None:
        try:
            snapshot.write(self.directory)
            self._written = snapshot
        except BaseException as exc:  # raised in the training thread (raise_failed)
            self._error = exc
        finally:
            done.set()

    def raise_failed(self) -> None:
        """Raise the error of a write that failed (once)."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def drain(self) -> None:
        """Wait for the write in flight; raise its error if it failed."""
        if self._done is not None:
            self._done.wait()
        if self._guard is not None:
            self._guard.remove()
            self._guard = None
        self.raise_failed()


class _FinishOnTerm:
    """SIGTERM ends the process only once the checkpoint write in flight is complete. The
    launcher tears a job down with SIGTERM when another worker fails, which can come right
    after an epoch's end: the default action would drop that epoch's checkpoint halfway, and
    the restart would redo the epoch. The training thread may be blocked inside MXNet then
    (waiting for the failed worker), where Python runs no handler, so a thread of its own reads
    the signal from Python's wakeup fd, waits for the write and exits with 128+SIGTERM; the
    handler, run by the training thread when it next runs Python, waits likewise, so no code
    after the signal runs. The launcher's SIGKILL, STOP_GRACE after its SIGTERM, still bounds
    the wait. Installed only from the main thread while SIGTERM is at its default and no wakeup
    fd is set: a script's own handling (asyncio's included) is left as it is."""

    def __init__(self, writing, wake: socket.socket, read: socket.socket):
        self._writing, self._wake, self._read = writing, wake, read
        threading.Thread(target=self._watch, name="gluondist-sigterm", daemon=True).start()

    @classmethod
    def install(cls, writing) -> Optional["_FinishOnTerm"]:
        """A guard for the write whose event ``writing()`` returns (None: none), or None where
        SIGTERM is not left to its default here."""
        if threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return None
        read, wake = socket.socketpair()
        wake.setblocking(False)
        old = signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
        if old != -1:  # someone's own (an event loop's): theirs stays
            signal.set_wakeup_fd(old)
            read.close()
            wake.close()
            return None
        guard = cls(writing, wake, read)
        signal.signal(signal.SIGTERM, guard.end)
        return guard

    def end(self, *_) -> None:
        """Wait for the write in flight, then exit as SIGTERM would have (128+SIGTERM)."""
        done = self._writing()
        if done is not None:
            done.wait()
        os._exit(128 + signal.SIGTERM)

    def _watch(self) -> None:
        while True:
            try:
                got = self._read.recv(64)
            except OSError:
                return
            if not got:
                return  # removed
            if signal.SIGTERM in got:
                self.end()

    def remove(self) -> None:
        """SIGTERM back to its default (from the main thread, which installed it)."""
        if signal.getsignal(signal.SIGTERM) == self.end:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        old = signal.set_wakeup_fd(-1)
        if old != self._wake.fileno():  # set by someone since: theirs stays
            signal.set_wakeup_fd(old)
        self._wake.close()  # the watching thread reads the end of the pair and returns


def not_finite(names, epoch: int, epochs: int, batch: Optional[int] = None) -> str:
    """What fit says of parameters ``names`` that became NaN or infinite in ``epoch`` (by
    its ``batch``-th batch, found at a step checkpoint)."""
    by = f", by its batch {batch}" if batch else ""
    return (f"parameter(s) {', '.join(names[:3])} became NaN or infinite in epoch "
            f"{epoch + 1}/{epochs}{by}: the data likely holds NaN or infinity (only arrays are "
            "checked before training) or the learning rate is too high; the checkpoints "
            "written before are kept")


def where(epoch: int, batch: Optional[int]) -> str:
    """``epoch 3`` or ``epoch 3, batch 40``, counted from 1 as fit's lines are."""
    return f"epoch {epoch + 1}" + (f", batch {batch}" if batch else "")


class _Reuse:
    """``reuse(key, array)``: a CPU copy of ``array``, made into the spare snapshot's array of
    that key when its shape and type match, else into a new one."""

    def __init__(self, spare: Optional[Snapshot]):
        self.old = {}
        if spare is not None:
            self.old.update({("p", k): a for k, a in spare.params.items()})
            self.old.update({("o", k): a for k, a in spare.arrays.items()})
            self.old.update({("c", k): a for k, a in spare.callback_arrays.items()})

    def __call__(self, key, array):
        old = self.old.get(key)
        if old is not None and old.shape == array.shape and old.dtype == array.dtype and \
                old.stype == array.stype == "default":
            array.copyto(old)
            return old
        return array.copyto(mx.cpu())


def _optimizer(trainer, arrays: dict, reuse) -> Optional[dict]:
    """The optimizer's part of state.json, its state arrays copied into ``arrays``."""
    updates = updates_of(trainer)
    if updates is None:
        return None  # the servers hold the state (dist_async)
    return updates.dump(arrays, lambda name, array: reuse(("o", name), array))


def _reason(exc: BaseException, directory: Path) -> str:
    """What went wrong in words: MXNet's writer says only "FileStream.Write incomplete"."""
    if getattr(exc, "errno", None) == errno.ENOSPC:
        return "no space left on device"
    try:
        if shutil.disk_usage(directory).free < (1 << 20):
            return "no space left on device"
    except OSError:
        pass
    return getattr(exc, "strerror", None) or str(exc).strip().splitlines()[-1][:200]


def regular(path: Path) -> Path:
    """``path``, if it is a regular file (a FIFO planted there would block a reader forever)."""
    if not path.is_file():  # False for a FIFO, a directory, a missing file
        raise ValueError(f"{path.name} is not a regular file")
    return path


def read_json(path: Path):
    with open(regular(path)) as f:
        return json.load(f)


def first_of_run(directory: Path) -> int:
    """The first checkpoint number of the current run (run.json's ``first``, else 0)."""
    if not (directory / RUN).exists():
        return 0
    try:
        first = read_json(directory / RUN)["first"]
        if not isinstance(first, int) or isinstance(first, bool) or not 0 <= first <= 10 ** 9:
            raise ValueError(f"'first' is {first!r}, not a checkpoint number")
        return first
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        log.warning("ignoring %s: %s", directory / RUN, exc)
        return 0


def next_number(directory: Path) -> int:
    found = numbers(directory) if directory.is_dir() else []
    return max([first_of_run(directory) - 1, *found], default=-1) + 1


def numbers(directory: Path) -> List[int]:
    return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(directory)) if m)


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
