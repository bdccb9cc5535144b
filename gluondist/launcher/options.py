"""The one input type of the launcher, built by the CLI and by ``gluondist.launch()`` alike."""
from __future__ import annotations

import math
import os
import shutil
import sys
import dataclasses
from dataclasses import dataclass, field, fields
from typing import Dict, Iterable, Mapping, Optional, Tuple, Union

from .. import envvars as ev
from ..kv import chunks
from ..kv.kinds import DIST_KINDS
from .errors import LaunchError
from .hosts import Host, place
from .transports import backend


@dataclass(frozen=True)
class Flag:
    """How a LaunchOptions field is given on the command line: cli.py makes its click option
    from this and the field's default, for ``gluondist launch`` and ``gluondist bench``."""

    names: Tuple[str, ...]
    help: str = ""
    type: object = None  # None: the default's type; "dir"/"file" a path; "seconds" > 0
    envvar: Optional[str] = None
    metavar: Optional[str] = None
    multiple: bool = False
    bench: bool = False  # also an option of `gluondist bench kvstore` (how its jobs run)


def _flag(default, *names: str, **how) -> "field":
    kind = dict(default_factory=default) if callable(default) else dict(default=default)
    return field(**kind, metadata={"flag": Flag(names, **how)})


@dataclass(frozen=True)
class LaunchOptions:
    """What to launch. ``command`` is a ``.py`` script with its arguments (run with ``python``),
    or any command. Validated by :meth:`validate` before anything starts. Each field with a
    command-line flag declares it here, once."""

    command: Tuple[str, ...]
    # N, or "MIN:MAX" / (MIN, MAX) for an elastic job: then the most workers (MAX), and
    # min_workers the fewest it runs with; an attempt's options hold the count it starts
    num_workers: int = _flag(1, "-n", "--num-workers", type="workers", metavar="N|MIN:MAX",
                             envvar=ev.GLUONDIST_NUM_WORKERS,
                             help="Worker processes; MIN:MAX for an elastic job, which starts "
                                  "with as many as the reachable slots hold (up to MAX) and "
                                  "restarts with fewer (down to MIN) or more.")
    num_servers: int = _flag(1, "-s", "--num-servers", help="Parameter-server processes.",
                             envvar=ev.GLUONDIST_NUM_SERVERS)
    kvstore: str = _flag("dist_sync", "--kvstore", envvar=ev.GLUONDIST_KVSTORE,
                         help="What kvstore='auto' means in the job: dist_sync, dist_async or "
                              "dist_device_sync.")
    host: str = "127.0.0.1"
    start_timeout: float = _flag(300.0, "--start-timeout", type="seconds", bench=True,
                                 envvar=ev.GLUONDIST_START_TIMEOUT,
                                 help="Seconds for every worker and server to join before the "
                                      "job fails.")
    log_dir: Optional[str] = _flag(None, "--log-dir", type="dir", envvar=ev.GLUONDIST_LOG_DIR,
                                   help="Also write each process's output to DIR: "
                                        "scheduler.log, server.0.log, worker.1.log, ...")
    env: Dict[str, str] = _flag(dict, "--env", metavar="KEY=VALUE", multiple=True, bench=True,
                                envvar=ev.GLUONDIST_ENV,
                                help="Set an environment variable in every process "
                                     "(repeatable; its variable takes space-separated "
                                     "pairs, used only without --env).")
    # OMP_NUM_THREADS per worker; None: cores / local workers
    threads: Optional[int] = _flag(None, "--threads", type=int, envvar=ev.GLUONDIST_THREADS,
                                   help="OMP_NUM_THREADS per worker [default: in a local job, "
                                        "cores / workers unless OMP_NUM_THREADS is set; "
                                        "across hosts, not set].")
    # start a failed job again, from scratch, at most this many times
    max_restarts: int = _flag(0, "--max-restarts", envvar=ev.GLUONDIST_MAX_RESTARTS,
                              help="Start a failed job again (all of it, fresh ports) up to "
                                   "this many times; fit(checkpoint_dir=...) resumes from the "
                                   "newest checkpoint: an epoch's end, or with "
                                   "checkpoint_every a step checkpoint mid-epoch.")
    launcher: str = _flag("local", "--launcher", envvar=ev.GLUONDIST_LAUNCHER, bench=True,
                          help="local; ssh to place processes on -H hosts; slurm inside an "
                               "allocation.")
    # Host(name, slots) for ssh and slurm (from the allocation), or -H's text: a hostfile's
    # path or host1:2,host2:2
    hosts: Union[Tuple, str] = _flag((), "-H", "--hostfile", "--hosts", type=str,
                                     envvar=ev.GLUONDIST_HOSTS, metavar="HOSTFILE|HOST:SLOTS,...",
                                     bench=True,
                                     help="A hostfile (lines `host slots=N`) or inline "
                                          "host1:2,host2:2.")
    hosts_source: str = "the hosts"  # how to name them in messages ("hosts.txt")
    # Hosts of the servers alone (Host(name, servers on it)), or that text as given: by default
    # the servers go round-robin on -H's hosts
    server_hosts: Union[Tuple, str] = _flag((), "--server-hosts", type=str,
                                            envvar=ev.GLUONDIST_SERVER_HOSTS,
                                            metavar="HOSTFILE|HOST:N,...", bench=True,
                                            help="Put the servers on these hosts, N per host "
                                                 "(default 1), round-robin, instead of on -H's "
                                                 "hosts (--launcher ssh).")
    server_hosts_source: str = "--server-hosts"
    interface: Optional[str] = _flag(None, "--interface", type=str, bench=True,
                                     envvar=ev.GLUONDIST_INTERFACE,
                                     help="Network interface ps-lite uses on each host.")
    gpus_per_worker: int = _flag(0, "--gpus-per-worker", envvar=ev.GLUONDIST_GPUS_PER_WORKER,
                                 help="Give each worker its own GPUs on its host "
                                      "(CUDA_VISIBLE_DEVICES).")
    ssh_config: Optional[str] = _flag(None, "--ssh-config", type="file", bench=True,
                                      envvar=ev.GLUONDIST_SSH_CONFIG,
                                      help="An ssh client configuration file (ssh -F).")
    # The scheduler's address as the others reach it (NAT, containers); it then binds 0.0.0.0.
    scheduler_address: Optional[str] = _flag(None, "--scheduler-address", type=str, bench=True,
                                             envvar=ev.GLUONDIST_SCHEDULER_ADDRESS,
                                             help="The address the others reach the scheduler "
                                                  "at, when it differs from its host's (NAT, "
                                                  "containers); the scheduler then binds "
                                                  "0.0.0.0.")
    python: str = sys.executable
    # Stop the job when no worker made progress for this many seconds (None: never).
    stall_timeout: Optional[float] = _flag(None, "--stall-timeout", type="seconds",
                                           envvar=ev.GLUONDIST_STALL_TIMEOUT, metavar="SECONDS",
                                           help="Stop the job (exit 124, restartable) when no "
                                                "worker made progress for this long, and show "
                                                "every worker's stack [default: off; 300 "
                                                "recommended].")
    host_discovery: Optional[str] = _flag(None, "--host-discovery", type="file",
                                          envvar=ev.GLUONDIST_HOST_DISCOVERY, metavar="SCRIPT",
                                          help="An executable printing the usable hosts, one "
                                               "HOST[:SLOTS] a line, run instead of -H at the "
                                               "start and every few seconds: an elastic job "
                                               "grows onto new hosts at its next "
                                               "checkpoint, an epoch's end or, with fit's "
                                               "checkpoint_every, a step checkpoint "
                                               "(--launcher ssh).")
    link_timeout: float = _flag(18.0, "--link-timeout", type="seconds", bench=True,
                                envvar=ev.GLUONDIST_LINK_TIMEOUT, metavar="SECONDS",
                                help="Seconds a host may be unreachable before it counts as "
                                     "lost (--launcher ssh): shorter restarts sooner, but a "
                                     "network blip that long ends the attempt.")
    min_workers: Optional[int] = None  # an elastic job's fewest workers (None: num_workers)

    def __post_init__(self):
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", dict(self.env))
        least, most = _workers_value(self.num_workers, self.min_workers)
        object.__setattr__(self, "num_workers", most)
        object.__setattr__(self, "min_workers", least)
        for name in ("hosts", "server_hosts"):  # a str (as given) is read by supervisor.resolve
            object.__setattr__(self, name, _hosts_value(name, getattr(self, name)))

    @property
    def fewest_workers(self) -> int:
        return self.min_workers if self.min_workers is not None else self.num_workers

    @property
    def elastic(self) -> bool:
        """The worker count may change between attempts (-n MIN:MAX, --host-discovery)."""
        return self.fewest_workers < self.num_workers or self.host_discovery is not None

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
        _check_texts(self)
        for text in (self.hosts, self.server_hosts):
            if isinstance(text, str):
                raise LaunchError(f"hosts {text!r} not read yet: supervisor.resolve() reads -H "
                                  "and --server-hosts before validating")
        head = self.command[0]
        if self.is_script and not os.path.isfile(head):
            raise LaunchError(f"script {head!r} not found; give the path of a .py file")
        if not self.is_script and shutil.which(head) is None:
            raise LaunchError(f"command {head!r} not found on PATH")
        check_whole("-n/--num-workers", self.num_workers, 1)
        check_whole("-n/--num-workers' MIN", self.fewest_workers, 1, self.num_workers,
                    hint=" (MIN:MAX, MIN at most MAX)")
        if self.host_discovery is not None:
            if not os.path.isfile(self.host_discovery) or \
                    not os.access(self.host_discovery, os.X_OK):
                raise LaunchError(f"--host-discovery {self.host_discovery!r} is not an "
                                  "executable file; give a script that prints HOST[:SLOTS] "
                                  "lines (chmod +x)")
        check_whole("-s/--num-servers", self.num_servers, 1,
                    hint=" (a parameter-server job needs a server)")
        check_kvstore(self.kvstore)
        _check_seconds(self)
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
        if self.threads is not None:
            check_whole("--threads", self.threads, 1)
        check_env(self.env)
        if self.log_dir is not None:
            _check_log_dir(os.fspath(self.log_dir))
        return self

    def _check_placement(self) -> None:
        """The launcher (its backend's own checks), its hosts and the server hosts fit
        together, and the roles fit on them."""
        backend(self.launcher).check(self)
        if self.hosts:  # an elastic job needs room for its fewest workers only
            dataclasses.replace(self, num_workers=self.fewest_workers).placement()


def check_whole(flag: str, value, least: int, most: Optional[int] = None, hint: str = "") -> None:
    """Raise LaunchError unless ``value`` is a whole number (not a bool) of least..most."""
    if not _whole(value) or value < least or (most is not None and value > most):
        within = f"{least}..{most}" if most is not None else f"at least {least}"
        raise LaunchError(f"{flag} must be a whole number, {within}, got {value!r}{hint}")


def check_kvstore(kind) -> None:
    if kind not in DIST_KINDS:
        raise LaunchError(f"--kvstore {kind!r} is not a distributed kind; use one of "
                          f"{', '.join(DIST_KINDS)}")


# what the launcher sets for each process, and the option that sets it
LAUNCHERS = {ev.DMLC_ROLE: "-n and -s place the roles", ev.DMLC_NUM_WORKER: "give -n",
             ev.DMLC_NUM_SERVER: "give -s", ev.DMLC_PS_ROOT_URI: "give --scheduler-address",
             ev.DMLC_PS_ROOT_PORT: "each attempt picks a free one",
             ev.DMLC_NODE_HOST: "give -H or --interface", ev.GLUONDIST_RANK: "from -n",
             ev.GLUONDIST_KVSTORE: "give --kvstore",
             ev.GLUONDIST_RESTART_COUNT: "it counts the attempts"}


def check_env(env: Dict[str, str]) -> None:
    """Every pair of ``env`` is a KEY=VALUE a process can be given: both strings, a key; and
    the values gluondist's workers read from it, with this environment's, are valid (checked
    here, before any process starts)."""
    bad = [k for k, v in env.items() if not isinstance(k, str) or not k or "=" in k
           or not isinstance(v, str)]
    if bad:
        raise LaunchError(f"--env {bad[0]!r}={env[bad[0]]!r}: write KEY=VALUE, both strings")
    own = [k for k in env if k in LAUNCHERS]
    if own:
        raise LaunchError(f"--env {own[0]}: the launcher sets it for each process "
                          f"({LAUNCHERS[own[0]]}); leave it out of --env")
    try:
        chunks.check_environment({**os.environ, **env})
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def _check_seconds(options: LaunchOptions) -> None:
    """Every option declared in seconds is a positive number (or None, where that is its
    default: off)."""
    for f in fields(options):
        flag = f.metadata.get("flag")
        value = getattr(options, f.name)
        if flag is None or flag.type != "seconds" or (value is None and f.default is None):
            continue
        if not _number(value) or not 0 < value < math.inf:
            raise LaunchError(f"{flag.names[-1]} must be a positive number of seconds, got "
                              f"{value!r}")


def _hosts_value(name: str, value) -> Union[Tuple, str]:
    """``hosts``/``server_hosts`` as given: text (read later), Host objects, a list of
    ``HOST[:N]`` strings or a dict HOST -> N (both made into that text)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ",".join(f"{host}:{count}" for host, count in value.items())
    try:
        items = tuple(value)
    except TypeError:
        items = None
    if items is not None and items and all(isinstance(i, str) for i in items):
        return ",".join(items)
    if items is None or not all(isinstance(i, Host) for i in items):
        raise LaunchError(f"{name} must be 'HOST[:N],...', a hostfile's path, or a list of "
                          f"such hosts, not {value!r}")
    bad = [h for h in items if not _whole(h.slots) or h.slots < 1]
    if bad:
        raise LaunchError(f"{name}: host {bad[0].name!r} has {bad[0].slots!r} slots; give 1 or "
                          "more")
    names = [h.name for h in items]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise LaunchError(f"{name} names host {twice!r} twice; give its slots once")
    return items


def _workers_value(value, least) -> Tuple[Optional[int], object]:
    """``(min_workers, num_workers)`` from num_workers as given: N, "N", "MIN:MAX" or
    (MIN, MAX); anything else is left for validate() to name."""
    if isinstance(value, str):
        text = value.strip()
        parts = text.split(":")
        if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
            raise LaunchError(f"-n {value!r}: give N, or MIN:MAX for an elastic job (whole "
                              "numbers)")
        value = tuple(int(p) for p in parts) if len(parts) == 2 else int(parts[0])
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise LaunchError(f"num_workers {value!r}: give N, or (MIN, MAX) for an elastic job")
        return value[0], value[1]
    return least, value


def _check_texts(options: "LaunchOptions") -> None:
    for name in ("log_dir", "ssh_config", "interface", "scheduler_address"):
        value = getattr(options, name)
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise LaunchError(f"{name} must be a string (a path, a name), not {value!r}")


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


def from_environment(command: Tuple[str, ...], given: Mapping[str, object],
                     environ: Mapping[str, str]) -> LaunchOptions:
    """LaunchOptions for ``gluondist.launch()`` in the CLI's order: a field ``given`` (an
    argument) as given, else its flag's variable when ``environ`` sets it (not empty, as click
    has it), read as ``gluondist launch`` reads it, else its default. A value it cannot read
    is a LaunchError naming the variable; one out of range is refused later, by validate(),
    naming its flag, as the CLI does."""
    values = dict(given)
    for name, (flag, default) in flags().items():
        text = environ.get(flag.envvar) if flag.envvar else None
        if name not in values and text:
            values[name] = _from_text(flag, default, text)
    return LaunchOptions(tuple(command), **values)


# what a variable's text must be, by its flag's kind (Flag.type, else the default's type)
_TEXTS = {int: "a whole number", "seconds": "a positive number of seconds",
          "workers": "N, or MIN:MAX for an elastic job",
          "multiple": "space-separated KEY=VALUE pairs"}


def _from_text(flag: Flag, default, text: str):
    """A flag's value from its variable's text, as click converts it for the CLI (a
    repeatable flag's variable split on whitespace)."""
    kind = "multiple" if flag.multiple else flag.type if flag.type is not None else type(default)
    try:
        if kind == "multiple":
            return env_pairs(text.split())
        if kind is int:
            return int(text)
        if kind == "seconds":
            return float(text)
        if kind == "workers":
            _workers_value(text, None)
        return text
    except (ValueError, LaunchError) as exc:
        raise LaunchError(f"{flag.envvar}={text!r} ({'/'.join(flag.names[:2])}) must be "
                          f"{_TEXTS[kind]}; unset it or fix it") from exc


def env_pairs(pairs: Iterable[str]) -> Dict[str, str]:
    """``--env``'s KEY=VALUE pairs as a dict."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise LaunchError(f"--env {pair!r}: write KEY=VALUE")
        env[key] = value
    return env


def flags() -> Dict[str, Tuple[Flag, object]]:
    """Each field with a flag: its Flag and its default (a fresh one for a factory)."""
    found = {}
    for f in fields(LaunchOptions):
        if "flag" in f.metadata:
            default = f.default_factory() if callable(f.default_factory) else f.default
            found[f.name] = (f.metadata["flag"], default)
    return found
