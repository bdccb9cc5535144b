"""A worker's side of an elastic job (``gluondist launch -n MIN:MAX``): whether the launcher asked
the job to stop at its next checkpoint (an epoch's end, or a step checkpoint of fit's
``checkpoint_every``), so that it can start again with more workers.

The launcher asks by sending :data:`SIGNAL` to every worker (locally, or through the ssh
remote side); the worker bootstrap turns it into a flag. ``fit`` reads :func:`requested` at each
checkpoint, the workers agree on it (one stopping alone would leave the others blocked in push),
and once the checkpoint is written each worker leaves with :data:`EXIT`, which the
launcher reads as "stopped to grow", not as a failure. A hand-written loop can do the same: after
each checkpoint it writes, ``if gluondist.elastic.agreed(): sys.exit(EXIT)``.

Standard library only (the bootstrap imports it before the script).
"""
import signal
import threading

from . import wire

SIGNAL = signal.SIGUSR2  # the launcher's request (SIGUSR1 dumps the stacks)
EXIT = wire.RESIZED  # a worker's exit status after it stopped for a resize

_asked = threading.Event()


def listen() -> None:
    """Turn :data:`SIGNAL` into the flag :func:`requested` reads, and take a request held
    until now (the bootstrap calls this before anything else).

    The signal's default action ends a process, so a worker is started with it held (blocked,
    which a child inherits and exec keeps, see ``proctree.holding``): a request sent before
    this handler exists stays pending, and is taken here, not fatal (issue 36, defect 8)."""
    signal.signal(SIGNAL, lambda *_: _asked.set())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {SIGNAL})


def request() -> None:
    """Set the flag, as the launcher's signal does (for tests)."""
    _asked.set()


def requested() -> bool:
    """Whether the launcher asked this worker to stop at its next checkpoint."""
    return _asked.is_set()


def agreed() -> bool:
    """Whether any worker of this process's ``dist_sync`` job was asked (every worker must
    call it at the same point; one process: :func:`requested`)."""
    from . import kvstore
    if kvstore.num_workers() <= 1:
        return requested()
    return bool(kvstore.allreduce([float(requested())])[0] > 0)
