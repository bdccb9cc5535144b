"""A pure function from options to the processes to start: testable without starting any."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from .. import envvars as ev
from .hosts import Host, Placement, gpu_list
from .options import LaunchOptions
from .roles import (job_env, pslite_verbose, role_env, server_argv, worker_argv,
                    worker_defaults)
from .transports import backend

@dataclass(frozen=True)
class ProcessSpec:
    role: str  # scheduler | server | worker
    rank: int
    host: str
    argv: Tuple[str, ...]
    env: Mapping[str, str]  # what this process gets on top of the launcher's environment

    @property
    def label(self) -> str:
        return self.role if self.role == "scheduler" else f"{self.role} {self.rank}"

    @property
    def log_name(self) -> str:
        return self.label.replace(" ", ".") + ".log"


@dataclass(frozen=True)
class LaunchPlan:
    port: int
    specs: Tuple[ProcessSpec, ...]
    notes: Tuple[str, ...] = ()

    @property
    def spans_hosts(self) -> bool:
        return len({s.host for s in self.specs}) > 1

    def of_role(self, role: str) -> Tuple[ProcessSpec, ...]:
        return tuple(s for s in self.specs if s.role == role)


def pslite_order(hosts: Sequence[Host]) -> list:
    """Indices of ``hosts`` in the order ps-lite ranks their nodes. Its scheduler sorts nodes
    with ``(a.hostname.compare(b.hostname) | (a.port < b.port)) > 0``: descending address,
    then ascending port; the plan gives each host's nodes ascending ports in index order."""
    return sorted(range(len(hosts)), key=lambda i: hosts[i].addr, reverse=True)  # stable


def thread_count(options: LaunchOptions, cores: int, base_env: Mapping[str, str]) -> Optional[int]:
    """OMP threads per worker: ``--threads`` whenever given (over the user's OMP_NUM_THREADS,
    on every launcher); else cores / workers, or None when the user set OMP_NUM_THREADS or
    the workers run on other hosts (whose cores the launcher does not know)."""
    if options.threads is not None:
        return options.threads
    if user_value(options, base_env, ev.OMP_NUM_THREADS) is not None or options.hosts:
        return None
    return max(1, cores // options.num_workers)


def user_value(options: LaunchOptions, base_env: Mapping[str, str], name: str) -> Optional[str]:
    """What the user set ``name`` to for the job: ``--env`` first, then the environment."""
    return options.env.get(name, base_env.get(name))


def placement_of(options: LaunchOptions) -> Placement:
    """Where each role runs: on ``options.hosts`` (resolved), or all on this machine."""
    if options.hosts:
        return options.placement()
    here = Host(options.host)
    return Placement(here, (here,) * options.num_servers, (here,) * options.num_workers,
                     tuple(range(options.num_workers)))


def build_plan(options: LaunchOptions, port: int, node_ports: Sequence[int] = (),
               cores: int = 1, base_env: Mapping[str, str] = None,
               attempt: int = 0) -> LaunchPlan:
    """The scheduler, servers and workers to start, in that order.

    ``port`` is the scheduler's; ``node_ports`` (servers first, then workers), when given, fix
    each node's port in ascending order so ps-lite's ranks equal ours (see pslite_order; on
    another host such a port is only probably free: if taken, ps-lite picks another and
    ``gluondist.kvstore.rank()`` still follows the kvstore). ``base_env`` is the
    launcher's environment, read only to respect what the user set. ``attempt`` is the
    attempt's index (0 first; every restart, grow and port retry adds one)."""
    base_env = {} if base_env is None else base_env
    placement = placement_of(options)
    common = job_env(options.scheduler_address or placement.scheduler.addr, port,
                     options.num_workers, options.num_servers, options.interface)
    threads = thread_count(options, cores, base_env)
    # What the launcher itself relies on goes over the user's --env: ps-lite's join messages
    # (see pslite_verbose) and an explicit --threads.
    forced = {ev.PS_VERBOSE: pslite_verbose(user_value(options, base_env, ev.PS_VERBOSE))[0]}
    ports = sorted(node_ports)
    server_ports = ports[:options.num_servers]
    worker_ports = ports[options.num_servers:]

    def spec(role, rank, host, argv, extra):
        # ps-lite reads DMLC_INTERFACE only when DMLC_NODE_HOST is empty
        where = {} if options.interface and role != "scheduler" else {ev.DMLC_NODE_HOST: host.addr}
        env = {**common, **where, **role_env(role, rank, options.kvstore, attempt), **extra,
               **options.env, **forced}
        if role == "worker" and options.threads is not None:
            env[ev.OMP_NUM_THREADS] = str(options.threads)
        return ProcessSpec(role, rank, host.name, tuple(argv), env)

    light = {ev.OMP_NUM_THREADS: "1"} if threads is not None else {}  # servers only add up
    scheduler_extra = dict(light)
    if options.scheduler_address:
        # ps-lite binds a node to the address it advertises; only the scheduler can bind
        # 0.0.0.0 instead, which it does under this flag (named for its first use).
        scheduler_extra[ev.DMLC_USE_KUBERNETES] = "1"
    specs = [spec("scheduler", 0, placement.scheduler, server_argv(options.python),
                  scheduler_extra)]
    for r, i in enumerate(pslite_order(placement.servers)):
        extra = {**light, ev.PS_PORT: str(server_ports[r])} if server_ports else dict(light)
        specs.append(spec("server", r, placement.servers[i], server_argv(options.python), extra))
    argv = worker_argv(options.command, options.python)
    defaults = worker_defaults({**base_env, **options.env}, options.gpus_per_worker)
    for r, i in enumerate(pslite_order(placement.workers)):
        extra = {ev.PS_PORT: str(worker_ports[r])} if worker_ports else {}
        extra.update(defaults)
        if threads is not None:
            extra[ev.OMP_NUM_THREADS] = str(threads)
        if options.gpus_per_worker:
            extra[ev.CUDA_VISIBLE_DEVICES] = gpu_list(placement.local_ranks[i],
                                                      options.gpus_per_worker)
        specs.append(spec("worker", r, placement.workers[i], argv, extra))
    return LaunchPlan(port, tuple(specs), _threads_note(options, threads, cores))


def _threads_note(options: LaunchOptions, threads: Optional[int], cores: int) -> Tuple[str, ...]:
    """What the launcher tells the user when it chose the workers' thread count."""
    if threads is None or options.threads is not None:
        return ()
    return (f"OMP_NUM_THREADS={threads} for each of {options.num_workers} worker(s) on "
            f"{cores} core(s); set OMP_NUM_THREADS to override",)


# Every name gluondist defines (envvars.py); a GLUONDIST_* or DMLC_* name outside it is no
# setting of gluondist's. ps-lite's PS_* names always travel (its list is its own): none is told.
KNOWN = frozenset(v for k, v in vars(ev).items() if k.isupper() and isinstance(v, str))
UNSENT_PREFIXES = ("GLUONDIST_", "DMLC_")


def environment_note(options: LaunchOptions, base_env: Mapping[str, str]) -> Optional[str]:
    """What the launcher says before it starts anything (a note: the job starts all the same)
    of the GLUONDIST_* and DMLC_* names of its own environment that gluondist does not define
    (a typo such as GLUONDIST_EXIT_GRAC): over a backend that does not hand its processes that
    environment whole (ssh), each one it leaves behind (a local job's processes would have it);
    on every backend, each GLUONDIST_* one that does reach them, since gluondist reads no such
    name. A name ``--env`` gives is the user's own: never told. None: nothing to say."""
    sent = backend(options.launcher).sent_env(base_env)
    unknown = [k for k in sorted(base_env) if k not in KNOWN and k not in options.env]
    unsent = [k for k in unknown if k.startswith(UNSENT_PREFIXES) and k not in sent]
    unread = [k for k in unknown if k.startswith("GLUONDIST_") and k not in unsent]
    said = []
    if unsent:
        said.append(f"not sent to the remote hosts: {', '.join(unsent)} "
                    f"({_settings(unsent)}; a setting of your own goes with --env NAME=VALUE)")
    if unread:
        said.append(f"{_settings(unread)}: {', '.join(unread)} (gluondist reads no such name: "
                    "check the spelling against docs/environment.md)")
    return "; ".join(said) or None


def _settings(names) -> str:
    return "not a gluondist setting" if len(names) == 1 else "not gluondist settings"
