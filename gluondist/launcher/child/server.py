"""The scheduler's and servers' program, ``python -m gluondist.launcher.child.server``: MXNet's
server loop with a controller that cannot be made to run code, and whose errors end it.

A scheduler or server that merely imports mxnet runs MXNet's own loop
(``mxnet/kvstore/kvstore_server.py``), which has two flaws. Its controller ``pickle.loads``
command 0 (what ``kv.set_optimizer`` sends) from any peer: ps-lite has no authentication, so
anyone who reaches the port runs code as the server's user. And an exception in its
controller or in the optimizer's update is printed by ctypes and ignored: training goes on
without the optimizer, and the job ends with code 0. Here the optimizer goes through
:func:`gluondist.kv.safepickle.load_optimizer`, and a refusal or an exception in the controller
or the updater prints one line (and the traceback) and ends the server with ``FAILED``, so the
launcher fails the job with this server as its root cause. The launcher starts this for the
scheduler and servers wherever it starts them (local, ssh, Slurm, the Kubernetes pod).

It runs MXNet's C server loop through ctypes, without importing mxnet (~2 s of CPU per
process); mxnet is imported only when an optimizer arrives (``dist_async``).
"""
from __future__ import annotations

import ctypes
import errno
import importlib.util
import os
import socket
import sys
import traceback
from typing import NoReturn

from ... import INSTALL_HINT, envvars as ev, mxnet_untested, mxnet_version_problem, wire
from . import SERVER

FAILED = 1  # the exit code of a server whose Python code (controller, optimizer) raised
REFUSED = wire.REFUSED  # the exit code of a server that refused a command
CONTROLLER = 0  # the one command MXNet hands to Python (kController); the rest stay in C++


def handle_command(command: int, body: bytes):
    """The optimizer that command ``command`` with ``body`` sets, or
    :class:`~gluondist.kv.safepickle.Refused`."""
    from ...kv.safepickle import Refused, load_optimizer
    if command != CONTROLLER:
        raise Refused(f"an unknown command ({command})")
    return load_optimizer(body)


def _die(what: str, code: int = FAILED) -> None:
    """Say why in one line, after any traceback, and end the process: a Python exception
    raised into ctypes' callback would be printed and ignored."""
    try:
        role = os.environ.get(ev.DMLC_ROLE, "server")
        sys.stderr.write(f"gluondist {role}: {what}; stopping\n")
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(code)


def port_taken(env=os.environ) -> bool:
    """Whether the scheduler's port is taken on the address ps-lite will bind (zmq_van.h:
    0.0.0.0 under DMLC_USE_KUBERNETES, else DMLC_PS_ROOT_URI), tried as ZeroMQ binds, with
    SO_REUSEADDR. The launcher picked the port free, but released it before this process
    started: another process may have taken it since. ps-lite would abort with "bind failed";
    this tells the launcher by exit code (wire.PORT_TAKEN) instead, and it retries."""
    host = "0.0.0.0" if env.get(ev.DMLC_USE_KUBERNETES) == "1" else env.get(ev.DMLC_PS_ROOT_URI)
    try:
        port = int(env.get(ev.DMLC_PS_ROOT_PORT, ""))
    except ValueError:
        return False
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as exc:  # another error (an address not of this host) is ps-lite's
            return exc.errno == errno.EADDRINUSE
    return False


def _fatal_on_error(function, what: str):
    def guarded(*args):
        try:
            return function(*args)
        except BaseException:
            traceback.print_exc()
            _die(what)
    return guarded


def _library():
    """libmxnet, loaded as ``import mxnet`` loads it (its own libinfo finds the file), but
    without importing the package: that costs ~2 s of CPU per process, generating the Python
    wrappers of every operator, none of which a scheduler or a summing server calls."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or spec.origin is None:
        _die(f"mxnet is not installed for {sys.executable}; install it there: {INSTALL_HINT}")
    path = os.path.join(os.path.dirname(spec.origin), "libinfo.py")
    try:
        info = importlib.util.spec_from_file_location("gluondist_mxnet_libinfo", path)
        libinfo = importlib.util.module_from_spec(info)
        info.loader.exec_module(libinfo)
        library = ctypes.CDLL(libinfo.find_lib_path()[0], ctypes.RTLD_LOCAL)
    except Exception as exc:  # a broken install: no library, a missing dependency of it
        message = " ".join(str(exc).split())
        _die(f"mxnet at {os.path.dirname(spec.origin)} cannot load its library ({message}); "
             f"reinstall it for {sys.executable}")
    version = getattr(libinfo, "__version__", "of no version")
    problem, untested = mxnet_version_problem(version), mxnet_untested(version)
    if problem:
        _die(problem)
    if untested:
        print(f"gluondist: warning: {untested}", file=sys.stderr, flush=True)
    library.MXGetLastError.restype = ctypes.c_char_p
    return library


def _import_mxnet():
    """mxnet itself, imported once an optimizer arrives (``dist_async``). MXNet starts its own
    (unsafe) server loop while mxnet is imported, unless this process looks like a worker then:
    it asks ps-lite, which reads DMLC_ROLE from the environment each time
    (kvstore_server._init_kvstore_server_module); ps-lite read the real role when it joined."""
    if "mxnet" in sys.modules:  # a later optimizer: the role stays as it is
        return sys.modules["mxnet"]
    # (ps-lite's threads run by now: the variable is replaced, never added, so glibc swaps
    # one pointer in environ and frees nothing that a concurrent getenv could be reading)
    role = os.environ[ev.DMLC_ROLE]
    os.environ[ev.DMLC_ROLE] = "worker"
    try:
        import mxnet
    finally:
        os.environ[ev.DMLC_ROLE] = role
    return mxnet


def _controller(handle):
    """The server's controller: command 0 sets the optimizer that the servers apply
    (``dist_async``), through mxnet's own KVStore on this process's kvstore."""
    kept = []  # the KVStore wrapper, alive to the end: its __del__ would free the handle

    def controller(command, body, _):
        mx = _import_mxnet()  # first: gluondist.kv imports it
        from ...kv.safepickle import Refused
        try:
            optimizer = handle_command(command, body)
        except Refused as exc:
            _die(str(exc), REFUSED)
        if not kept:
            kept.append(mx.kv.KVStore(handle))
        kept[0]._set_updater(_fatal_on_error(mx.optimizer.get_updater(optimizer),
                                             "the optimizer's update raised"))
    return _fatal_on_error(controller, "the controller raised")


def _serve() -> NoReturn:
    """Join the job and serve until every worker is done (ps-lite's stop), then end at once:
    the scheduler's and servers' work is over, and C++'s exit-time destructors are skipped."""
    library = _library()
    if os.environ.get(ev.DMLC_ROLE) == "scheduler" and port_taken():
        _die(f"port {os.environ[ev.DMLC_PS_ROOT_PORT]} is taken", wire.PORT_TAKEN)
    handle = ctypes.c_void_p()
    _check(library, library.MXKVStoreCreate(b"dist", ctypes.byref(handle)))
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    controller = prototype(_controller(handle))
    _check(library, library.MXKVStoreRunServer(handle, controller, None))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _check(library, code: int) -> None:
    if code != 0:
        _die(f"MXNet: {library.MXGetLastError().decode(errors='replace').strip()}")


def main() -> int:
    role = os.environ.get(ev.DMLC_ROLE)
    if role not in ("scheduler", "server"):
        sys.stderr.write(f"python -m {SERVER}: "
                         f"needs {ev.DMLC_ROLE}=scheduler "
                         f"or server (got {role!r}); gluondist launch sets it\n")
        return 2
    _serve()


if __name__ == "__main__":
    sys.exit(main())
