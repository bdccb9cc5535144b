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
"""
from __future__ import annotations

import errno
import os
import socket
import sys
import traceback

from ... import envvars as ev, wire
from . import SERVER

FAILED = 1  # the exit code of a server whose Python code (controller, optimizer) raised
REFUSED = wire.REFUSED  # the exit code of a server that refused a command
CONTROLLER = 0  # the one command MXNet hands to Python (kController); the rest stay in C++


def handle(command: int, body: bytes):
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


def _serve() -> None:
    import mxnet as mx
    from mxnet.kvstore.kvstore_server import KVStoreServer

    from ...kv.safepickle import Refused

    class Server(KVStoreServer):
        def _controller(self):
            def controller(command, body, _):
                try:
                    optimizer = handle(command, body)
                except Refused as exc:
                    _die(str(exc), REFUSED)
                updater = mx.optimizer.get_updater(optimizer)
                self.kvstore._set_updater(
                    _fatal_on_error(updater, "the optimizer's update raised"))
            return _fatal_on_error(controller, "the controller raised")

    if os.environ.get(ev.DMLC_ROLE) == "scheduler" and port_taken():
        _die(f"port {os.environ[ev.DMLC_PS_ROOT_PORT]} is taken", wire.PORT_TAKEN)
    Server(mx.kv.create("dist")).run()


def main() -> int:
    role = os.environ.get(ev.DMLC_ROLE)
    if role not in ("scheduler", "server"):
        sys.stderr.write(f"python -m {SERVER}: "
                         f"needs {ev.DMLC_ROLE}=scheduler "
                         f"or server (got {role!r}); gluondist launch sets it\n")
        return 2
    # MXNet starts its own (unsafe) loop while mxnet is imported, unless this process looks
    # like a worker then: it asks ps-lite, which reads DMLC_ROLE from the environment each
    # time (kvstore_server._init_kvstore_server_module). The real role is back before the
    # kvstore is made, which is when ps-lite reads it to join the job.
    os.environ[ev.DMLC_ROLE] = "worker"
    try:
        import mxnet  # noqa: F401
    finally:
        os.environ[ev.DMLC_ROLE] = role
    _serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
