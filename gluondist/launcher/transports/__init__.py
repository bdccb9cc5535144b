"""The launcher's backends: how a job's processes are started and reached (``--launcher``).

Each backend is one module of this package holding a :class:`Backend` as ``BACKEND``, named in
``BACKENDS`` below: the one line a new backend adds. A backend declares what it can do (its
capabilities), finds its hosts, checks the options that concern it, and makes the
:class:`Transport` the process group starts each spec through. Nothing outside this package
compares launcher names: the rest of the launcher asks the backend.
"""
from __future__ import annotations

import importlib
import signal
import subprocess
from typing import IO, Callable, Dict, Mapping, Optional, Tuple

from ..child.proctree import signal_tree
from ..errors import LaunchError

# The annotations name plan.ProcessSpec, process.Child and options.LaunchOptions, not imported:
# those modules import this one, and the layers test keeps imports acyclic.

# name -> the module holding its BACKEND, in the order `--launcher`'s help lists them
BACKENDS: Dict[str, str] = {
    "local": __name__ + ".local",
    "ssh": __name__ + ".ssh",
    "slurm": __name__ + ".slurm",
}
_registered: Dict[str, "Backend"] = {}


class Transport:
    """How the process group starts and reaches each spec's process. A transport subclasses
    this and implements ``spawn``, ``request_stack`` and ``request_resize``; the attributes
    and the other methods have defaults, those of a process on this machine that has no side
    channel."""

    error_records = False  # a failing worker's error record reaches the launcher
    tree_cpu_known = False  # tree_cpu() gives figures (else the stall watch has heartbeats only)
    silence = 0.0  # seconds a host cut off from the launcher takes to end its processes (0: none)
    stop_slack = 0.0  # seconds stop() adds to the teardown's shared deadline

    def spawn(self, spec: "ProcessSpec", progress: bool = False,
              error_file: Optional[str] = None) -> Tuple[subprocess.Popen, Optional[IO[bytes]]]:
        """Start ``spec``: its process and its side channel (a binary stream of gluondist.wire
        lines, or None). The process must lead a session of its own (``start_new_session``):
        the teardown and the reaper signal that whole session, and killing the process must
        end whatever it stands for (a remote tree, a Slurm step). With ``progress`` a
        worker gets a progress channel; ``error_file`` is a local path where its bootstrap
        may record an exception (a transport that relays records otherwise may ignore it)."""
        raise NotImplementedError

    def stop(self, proc: subprocess.Popen) -> None:
        """Begin stopping a process; the teardown waits for it until its deadline (plus
        ``stop_slack``), then kills what is left. By default SIGTERM to its whole tree; a
        transport with its own way overrides it (ssh closes the session's stdin, so the remote
        side's teardown is waited for)."""
        signal_tree(proc.pid, signal.SIGTERM)

    def request_stack(self, proc: subprocess.Popen) -> None:
        """Ask the process for a dump of its Python stacks (on its output)."""
        raise NotImplementedError

    def request_resize(self, proc: subprocess.Popen) -> None:
        """Send a worker gluondist.elastic's request to stop at its next checkpoint."""
        raise NotImplementedError

    def tree_cpu(self, child: "Child") -> Optional[float]:
        """CPU seconds of the child's process tree so far, or None where unknown."""
        return None

    def stop_left(self, hosts) -> Dict[str, str]:
        """After an attempt that lost ``hosts``: stop whatever of the job still runs there,
        waiting for it, and say for each host what became of it (\"answered again: ...\"). By
        default nothing: a transport without hosts to lose has nothing left there."""
        return {}

    def lost(self, child: "Child") -> bool:
        """Whether the exited ``child`` lost its connection rather than failing (call once its
        side channel has been read to the end). By default never: nothing between the
        launcher and the process to lose."""
        return False


Show = Callable[[str, bool], None]


class Backend:
    """What a launcher kind is and can do. The defaults describe a backend on this machine
    alone; a module overrides what differs."""

    name = ""
    multi_host = False  # its processes run on other hosts (-H, --interface, NAT)
    takes_hosts = False  # the user gives hosts with -H (else: none, or discovered)
    server_hosts = False  # --server-hosts can give the servers hosts of their own
    progress = True  # workers have a progress channel: --stall-timeout works
    # -n MIN:MAX: the job may restart with another worker count (not inside a fixed allocation)
    elastic = True
    elastic_limit = ""  # why not, when it cannot: one phrase
    # where a worker's error record is written, for --dry-run ("the launcher's"), or None
    # when no record reaches the launcher
    error_file_home: Optional[str] = "the launcher's"

    def sent_env(self, env: Mapping[str, str]) -> Mapping[str, str]:
        """What of the launcher's environment ``env`` its processes get, under the plan's own
        values: by default all of it, as a child here or a Slurm step inherits it."""
        return env

    def discover(self, options: "LaunchOptions", env: Mapping[str, str]) -> "LaunchOptions":
        """The options with the hosts this backend finds itself (a Slurm allocation's)."""
        return options

    def check(self, options: "LaunchOptions") -> None:
        """Raise LaunchError for options this backend cannot run (generic checks are
        LaunchOptions.validate's)."""
        if options.host_discovery is not None and not self.takes_hosts:
            raise LaunchError(f"--host-discovery finds hosts for {_with('takes_hosts')}; "
                              f"{self.name} takes no hosts")
        if options.hosts and not self.takes_hosts and not self.multi_host:
            raise LaunchError("-H places processes on other hosts: add --launcher ssh")
        if options.server_hosts and not self.server_hosts:
            raise LaunchError("--server-hosts puts the servers on hosts of their own, which "
                              "needs --launcher ssh (and -H for the workers)")
        if options.interface is not None and not self.multi_host:
            raise LaunchError(f"--interface is for multi-host jobs ({_with('multi_host')}); "
                              "a local job binds 127.0.0.1")
        self.check_elastic(options)
        if options.stall_timeout is not None and not self.progress:
            raise LaunchError(f"--stall-timeout works with {_with('progress')}; "
                              f"{self.name} gives workers no progress channel")

    def check_elastic(self, options: "LaunchOptions") -> None:
        """Raise LaunchError for an elastic job on a backend that cannot change its worker
        count (checked before discover(): an allocation is read only for a job it can run)."""
        if options.elastic and not self.elastic:
            raise LaunchError(f"-n MIN:MAX and --host-discovery: {self.name} cannot change a "
                              f"job's worker count ({self.elastic_limit}); give -n N, or use "
                              f"{_with('elastic')}")

    def check_resources(self, options: "LaunchOptions") -> None:
        """Raise LaunchError when what the job asks for is not here (GPUs on this machine)."""

    def transport(self, options: "LaunchOptions", env: Mapping[str, str]) -> Transport:
        """The transport of a job with ``options`` (after any check of its hosts)."""
        raise NotImplementedError

    def preflight(self, options: "LaunchOptions") -> None:
        """Raise LaunchError naming the first host that cannot run the job (nothing to check
        by default)."""

    def unreachable(self, names, options: "LaunchOptions") -> Dict[str, str]:
        """Of the hosts ``names``, those that do not answer now, each with why in a few words
        (none by default: a backend on this machine has no hosts to lose)."""
        return {}

    def reachable(self, hosts: Tuple, server_hosts: Tuple, options: "LaunchOptions",
                  attempt: int, show: Show) -> Tuple[Tuple, Tuple]:
        """Before a restart: the hosts and server hosts that can take attempt ``attempt`` (each
        one left out said through ``show``). By default every host is kept."""
        return hosts, server_hosts


def names() -> Tuple[str, ...]:
    return tuple(dict.fromkeys([*BACKENDS, *_registered]))


def backend(name: str) -> Backend:
    """The backend called ``name``; LaunchError for an unknown one."""
    if name in _registered:
        return _registered[name]
    if not isinstance(name, str) or name not in BACKENDS:
        raise LaunchError(f"unknown launcher {name!r}; use one of {', '.join(names())}")
    return importlib.import_module(BACKENDS[name]).BACKEND


def register(instance: Backend) -> None:
    """Add a backend at run time (a plug-in, a test's fake), by its ``name``."""
    _registered[instance.name] = instance


def unregister(name: str) -> None:
    _registered.pop(name, None)


def _with(capability: str) -> str:
    """The backends that have ``capability``, as flags: "--launcher ssh or --launcher slurm"."""
    return " or ".join(f"--launcher {n}" for n in names() if getattr(backend(n), capability))
