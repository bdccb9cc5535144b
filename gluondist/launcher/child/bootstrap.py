"""Runs a worker's script (``bootstrap.py SCRIPT.py ARGS`` or ``bootstrap.py -m MODULE ARGS``)
and makes its failure end the process, recorded.

MXNet's kvstore destructor waits in a barrier for every worker at exit, so a worker that
raises or calls ``sys.exit(3)`` mid-training would hang there forever and the job with it. Here a
failure prints its traceback, runs the script's ``atexit`` handlers (MXNet's own excepted),
flushes every open file, and leaves with ``os._exit`` (code k, or 1), skipping that barrier;
the launcher then stops the rest. Handlers and flushes get ``GLUONDIST_EXIT_GRACE`` seconds
(10): then a timer thread leaves with the same code, and should the main thread hold the
interpreter, SIGALRM (its default action) ends the process 3 s later. Success also leaves with
``os._exit`` (0), after what a normal exit does and in its order: the script's threads joined,
MXNet's pending operations waited for (a loop may end right after its last step), its atexit
handlers and then MXNet's run, the kvstore freed (MXNet's exit barrier, which is what shuts the
servers down), open files flushed. See :func:`_finish` for why not a normal exit.

An uncaught exception is also written to ``GLUONDIST_ERROR_FILE`` (see errorfile.py), so the
launcher reports it whole and by the time it happened. SIGUSR1 dumps every thread's Python stack
to stderr (``faulthandler``, which works even when the main thread is stuck in C code): the
launcher asks for it when a job stalls; SIGUSR2 is the launcher's request to stop at the next
checkpoint (gluondist.elastic), kept as a flag for fit to act on: its handler is the first thing
installed, and a request held since the process started is taken then. Standard library only:
nothing imported before the script but these and gluondist's own small modules.
"""
import faulthandler
import importlib.util
import os
import re
import runpy
import signal
import sys
import time
import traceback

from ... import elastic, envvars, mxnet_version_problem
from . import BOOTSTRAP, errorfile
from .proctree import STACK_SIGNAL

EXIT_GRACE = 10.0  # seconds for atexit handlers and flushes after a failure (default)
# the backstop: SIGALRM ends the process this long after the grace, should the timer's
# thread never run (a handler that holds the GIL in C code)
ALARM_AFTER_GRACE = 3
MAX_GRACE = 86400  # a day: more is a typo (signal.alarm takes whole seconds, bounded)


def _leave(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _fail(code: int) -> None:
    """Leave after a failure as ``python SCRIPT.py`` would (atexit handlers, open files
    flushed) but within the grace, and never through MXNet's exit barrier."""
    import atexit
    import threading
    try:
        grace = float(os.environ.get(envvars.GLUONDIST_EXIT_GRACE, EXIT_GRACE))
    except ValueError:
        grace = EXIT_GRACE
    if not 0 <= grace <= MAX_GRACE:  # nan too
        grace = EXIT_GRACE
    timer = threading.Timer(grace, _leave, (code,))
    timer.daemon = True
    timer.start()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(int(grace) + ALARM_AFTER_GRACE)
    _flush_open_files()  # first too: a handler may hang
    notify = getattr(sys.modules.get("mxnet.base"), "_notify_shutdown", None)
    if notify is not None:  # it waits for the engine, which may wait for the servers
        atexit.unregister(notify)
    _run_exitfuncs()
    _flush_open_files()
    _leave(code)


def _run_exitfuncs() -> None:
    """The atexit handlers, each error printed and passed over as at a normal exit."""
    import atexit
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 (3.8 and 3.9 re-raise the last error, printed already)
        pass


def _finish(code: int = 0) -> None:
    """Leave after the script finished (returned, ``sys.exit(0)``, or ``sys.exit(elastic.EXIT)``
    after every worker stopped at one checkpoint to resize) as ``python SCRIPT.py`` would, in
    the order of ``Py_FinalizeEx``, but never through interpreter shutdown.

    Why (issue 28, point 7): MXNet passes its exit barrier and calls ``ps::Finalize``, which stops
    and joins ps-lite's ZMQVan threads, only in the distributed kvstore's destructor, run when the
    last reference to the Python ``KVStore`` goes. A closure the script leaves in a long-lived
    module (``sys.excepthook = lambda *a: ...``, a wrapped ``os.fsync``) keeps the script's globals
    alive, and so ``net`` -> ``Parameter._trainer`` -> ``Trainer._kvstore``: a cycle, which
    CPython's shutdown leaks once it has cleared the modules (its last garbage collection comes
    before). The kvstore is never freed, and C ``exit()`` then runs ``ps::Postoffice``'s static
    destructor, which destroys the ZMQVan with its threads still joinable: ``std::terminate``
    ("terminate called without an active exception"), SIGABRT, exit 134 after training ended.
    So here the kvstore is freed explicitly and the process ends before any static destructor."""
    import threading
    threading._shutdown()  # what the interpreter calls first: waits for non-daemon threads
    try:
        _wait_for_mxnet()
    except Exception as exc:  # noqa: BLE001 (MXNetError: an operation of the script failed)
        sys.stderr.write(f"gluondist: MXNet's pending work failed at exit: {exc}\n")
        _fail(1)
    _run_exitfuncs()  # the script's handlers, then MXNet's _notify_shutdown (LIFO)
    _flush_open_files()  # before the barrier too: the launcher may stop us while we wait there
    try:
        _free_kvstores()
    except Exception as exc:  # noqa: BLE001 (MXNetError; the process must end all the same)
        sys.stderr.write(f"gluondist: freeing the kvstore at exit failed: {exc}\n")
        code = 1
    _flush_open_files()
    _flush_c_stdio()
    _leave(code)


def _wait_for_mxnet() -> None:
    """Wait for every operation MXNet's engine still holds, if the script imported MXNet.

    A loop that ends right after its last ``trainer.step()`` leaves that step's push and pull
    in the engine; MXNet's ``_notify_shutdown`` (an atexit handler) then stopped the engine
    under them and never returned: 3 of 3 two-worker runs hung, 3 of 3 with ``mx.nd.waitall()``
    at the script's end exited 0 (issue 36, defect 11)."""
    base = sys.modules.get("mxnet.base")
    lib = getattr(base, "_LIB", None)
    if lib is not None:
        base.check_call(lib.MXNDArrayWaitAll())


def _free_kvstores() -> None:
    """Free every live distributed kvstore as its destructor would: MXNet's exit barrier, the
    servers told to stop (by rank 0), ps-lite finalized."""
    import gc
    kv_class = getattr(sys.modules.get("mxnet.kvstore"), "KVStore", None)
    if kv_class is None:
        return
    base = sys.modules["mxnet.base"]
    for obj in gc.get_objects():
        # type(), not isinstance(): that could call a user object's __class__ property
        if issubclass(type(obj), kv_class) and obj.type.startswith("dist"):
            handle, obj.handle = obj.handle, None  # a later __del__ frees NULL: nothing
            base.check_call(base._LIB.MXKVStoreFree(handle))


def _flush_c_stdio() -> None:
    """What C ``exit()`` would write: stdio buffers of C code (``os._exit`` skips them)."""
    import ctypes
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def _flush_open_files() -> None:
    """What interpreter shutdown would write: the buffers of every file still open."""
    import gc
    import io
    for obj in gc.get_objects():
        try:
            if isinstance(obj, io.IOBase) and not obj.closed and obj.writable():
                obj.flush()
        except Exception:  # noqa: BLE001 (a broken file must not stop the others)
            pass


def _show_gluondist_logs() -> None:
    """fit() reports each epoch through logging; show those lines in a launched job, as a
    terminal would show its progress bar. A script's own logging setup is left alone."""
    import logging
    logger = logging.getLogger("gluondist")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def main(argv) -> None:
    elastic.listen()  # first: a request held since the process started is taken now
    faulthandler.register(STACK_SIGNAL, all_threads=True)
    if not argv:
        sys.stderr.write(f"usage: python -m {BOOTSTRAP} SCRIPT.py|-m MODULE ...\n")
        _leave(2)
    _show_gluondist_logs()
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            _refuse_untested_mxnet()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(argv[0])
            sys.argv = [argv[0], *argv[1:]]
            sys.path[0] = os.path.dirname(script)  # as `python SCRIPT.py` would have it
            _refuse_untested_mxnet()
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code == elastic.EXIT:  # every worker stopped at the same checkpoint: a clean exit
            _finish(code)
        if code is not None and code != 0:
            if not isinstance(code, int):
                sys.stderr.write(f"{code}\n")
                code = 1
            _fail(code)
    except BaseException as exc:  # KeyboardInterrupt included: the job is going down anyway
        when = time.time()
        # The launcher may be stopping the job because of a later failure it noticed first:
        # finish the record (then exit) so the report can still put this one first. Ignored
        # for the whole process (a per-thread mask would leave MXNet's threads to take it);
        # the launcher's SIGKILL after its deadline still ends a record that never finishes.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        lines = _user_traceback(exc)
        path = os.environ.get(envvars.GLUONDIST_ERROR_FILE)
        if path:
            try:
                errorfile.write(path, exc, lines, when)
            except OSError as err:
                sys.stderr.write(f"gluondist: cannot write the error file {path}: {err}\n")
        sys.stderr.write("".join(lines))
        _fail(1)
    _finish()


def _refuse_untested_mxnet() -> None:
    """Raises ImportError (one line, gluondist.mxnet_version_problem's) when the mxnet the
    script would import is not the tested version and GLUONDIST_UNTESTED_MXNET is not 1: this
    file reads MXNet's internals at exit, whether or not the script uses gluondist. The version
    is read from the package's libinfo.py, as the servers read it, without importing mxnet."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or spec.origin is None:
        return  # no MXNet here: nothing of it to read
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "libinfo.py")) as f:
            found = re.search(r"^__version__\s*=\s*[\"']([^\"']+)", f.read(), re.M)
    except OSError:
        return
    problem = mxnet_version_problem(found.group(1)) if found else None
    if problem:
        raise ImportError(problem)


def _user_traceback(exc: BaseException) -> list:
    """The traceback as `python SCRIPT.py` would show it: without this file's and runpy's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__) or (
            tb is not None and "runpy" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return traceback.format_exception(type(exc), exc, tb)


if __name__ == "__main__":
    main(sys.argv[1:])
