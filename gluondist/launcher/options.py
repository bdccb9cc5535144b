"""The one input type of the launcher, built by the CLI and by ``gluondist.launch()`` alike."""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple, Union

from ..kinds import DIST_KINDS
from .errors import LaunchError  # noqa: F401  (its old home; gluondist.launcher.errors now)
from .hosts import place

LAUNCHERS = ("local", "ssh", "slurm")


@dataclass(frozen=True)
class LaunchOptions:
    """What to launch. ``command`` is a ``.py`` script with its arguments (run with ``python``),
    or any command. Validated by :meth:`validate` before anything starts."""

    command: Tuple[str, ...]
    num_workers: int = 1
    num_servers: int = 1
    kvstore: str = "dist_sync"
    host: str = "127.0.0.1"
    start_timeout: float = 300.0
    log_dir: Optional[str] = None
    env: Dict[str, str] = field(default_factory=dict)
    threads: Optional[int] = None  # OMP_NUM_THREADS per worker; None: cores / local workers
    max_restarts: int = 0  # start a failed job again, from scratch, at most this many times
    launcher: str = "local"  # local | ssh | slurm
    # Host(name, slots) for ssh and slurm (from the allocation), or -H's text: a hostfile's
    # path or host1:2,host2:2
    hosts: Union[Tuple, str] = ()
    hosts_source: str = "the hosts"  # how to name them in messages ("hosts.txt")
    # Hosts of the servers alone (Host(name, servers on it)), or that text as given: by default
    # the servers go round-robin on -H's hosts
    server_hosts: Union[Tuple, str] = ()
    server_hosts_source: str = "--server-hosts"
    interface: Optional[str] = None  # network interface ps-lite binds on each host
    gpus_per_worker: int = 0  # CUDA_VISIBLE_DEVICES: each worker its own GPUs on its host
    ssh_config: Optional[str] = None  # passed to ssh as -F
    # The scheduler's address as the others reach it (NAT, containers); it then binds 0.0.0.0.
    scheduler_address: Optional[str] = None
    python: str = sys.executable
    # Stop the job when no worker made progress for this many seconds (None: never).
    stall_timeout: Optional[float] = None

    def __post_init__(self):
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", dict(self.env))
        for name in ("hosts", "server_hosts"):  # a str (as given) is read by session.resolve
            if not isinstance(getattr(self, name), str):
                object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def num_processes(self) -> int:
        """Scheduler, servers and workers: one port each."""
        return 1 + self.num_servers + self.num_workers

    def placement(self):
        """Where the scheduler, servers and workers go on ``hosts`` (and ``server_hosts``)."""
        return place(self.hosts, self.num_workers, self.num_servers, self.hosts_source,
                     self.server_hosts, self.server_hosts_source)

    @property
    def all_hosts(self) -> Tuple:
        """Every host the job uses, each once: ``hosts``, then the server hosts."""
        names = {h.name for h in self.hosts}
        return tuple(self.hosts) + tuple(h for h in self.server_hosts if h.name not in names)

    @property
    def is_script(self) -> bool:
        return bool(self.command) and self.command[0].endswith(".py")

    def validate(self) -> "LaunchOptions":
        """Raise :class:`LaunchError` naming the first problem; returns self. Reads the file
        system but changes nothing (the launch creates ``log_dir``)."""
        if not self.command:
            raise LaunchError("nothing to run: give a SCRIPT.py or `-- COMMAND ...`")
        for text in (self.hosts, self.server_hosts):
            if isinstance(text, str):
                raise LaunchError(f"hosts {text!r} not read yet: session.resolve() reads -H "
                                  "and --server-hosts before validating")
        head = self.command[0]
        if self.is_script and not os.path.isfile(head):
            raise LaunchError(f"script {head!r} not found; give the path of a .py file")
        if not self.is_script and shutil.which(head) is None:
            raise LaunchError(f"command {head!r} not found on PATH")
        for name, value in (("-n/--num-workers", self.num_workers),
                            ("-s/--num-servers", self.num_servers)):
            if not _whole(value) or value < 1:
                hint = " (a parameter-server job needs a server)" if "server" in name else ""
                raise LaunchError(f"{name} must be a whole number, at least 1, got {value!r}"
                                  f"{hint}")
        if self.kvstore not in DIST_KINDS:
            raise LaunchError(f"--kvstore {self.kvstore!r} is not a distributed kind; use one "
                              f"of {', '.join(DIST_KINDS)}")
        if not _number(self.start_timeout) or not self.start_timeout > 0:
            raise LaunchError(f"--start-timeout must be positive, got {self.start_timeout!r}")
        if not _whole(self.max_restarts) or self.max_restarts < 0:
            raise LaunchError(f"--max-restarts must be 0 or more, got {self.max_restarts!r}")
        self._check_placement()
        if not _whole(self.gpus_per_worker) or self.gpus_per_worker < 0:
            raise LaunchError(f"--gpus-per-worker must be 0 or more, got {self.gpus_per_worker!r}")
        if self.scheduler_address is not None and not self.hosts:
            raise LaunchError("--scheduler-address is for multi-host jobs (--launcher ssh or "
                              "slurm); a local job binds 127.0.0.1")
        if self.ssh_config is not None and not os.path.isfile(self.ssh_config):
            raise LaunchError(f"--ssh-config {self.ssh_config!r} not found")
        if self.threads is not None and (not _whole(self.threads) or self.threads < 1):
            raise LaunchError(f"--threads must be a whole number, at least 1, got "
                              f"{self.threads!r}")
        bad = [k for k, v in self.env.items() if not isinstance(k, str) or not k or "=" in k
               or not isinstance(v, str)]
        if bad:
            raise LaunchError(f"--env {bad[0]!r}={self.env[bad[0]]!r}: write KEY=VALUE, both "
                              "strings")
        if self.interface is not None and self.launcher == "local":
            raise LaunchError("--interface is for multi-host jobs (--launcher ssh or slurm); "
                              "a local job binds 127.0.0.1")
        if self.stall_timeout is not None:
            if not _number(self.stall_timeout) or not self.stall_timeout > 0:
                raise LaunchError(f"--stall-timeout must be a positive number of seconds, got "
                                  f"{self.stall_timeout!r}")
            if self.launcher == "slurm":
                raise LaunchError("--stall-timeout works with --launcher local or ssh; Slurm "
                                  "steps have no progress channel")
        if self.log_dir is not None:
            _check_log_dir(self.log_dir)
        return self

    def _check_placement(self) -> None:
        """The launcher, its hosts and the server hosts fit together, and the roles fit on
        them."""
        if self.launcher not in LAUNCHERS:
            raise LaunchError(f"unknown launcher {self.launcher!r}; use one of "
                              f"{', '.join(LAUNCHERS)}")
        if self.launcher == "ssh" and not self.hosts:
            raise LaunchError("--launcher ssh needs hosts: -H hostfile or -H host1:2,host2:2")
        if self.launcher == "local" and self.hosts:
            raise LaunchError("-H places processes on other hosts: add --launcher ssh")
        if self.launcher == "slurm" and not self.hosts:
            raise LaunchError("--launcher slurm runs inside a Slurm allocation (sbatch or "
                              "salloc); none found (SLURM_JOB_ID is unset)")
        if self.server_hosts and self.launcher != "ssh":
            raise LaunchError("--server-hosts puts the servers on hosts of their own, which "
                              "needs --launcher ssh (and -H for the workers)")
        if self.hosts:
            self.placement()


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_log_dir(path: str) -> None:
    """The directory, or its nearest existing ancestor, must be one we can write in."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise LaunchError(f"--log-dir {path!r} cannot be created: it is a file")
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise LaunchError(f"--log-dir {path!r} cannot be created: {probe!r} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == os.path.abspath(path) else \
            f"cannot be created: {probe!r} is not writable"
        raise LaunchError(f"--log-dir {path!r} {what}")
