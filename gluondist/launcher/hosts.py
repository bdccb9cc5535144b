"""Hosts and placement for multi-machine jobs: pure functions, tested against literal values,
and ``read_hosts``, which reads ``-H``'s hostfile (or its inline form)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from .errors import LaunchError

_LINE = re.compile(r"^(?P<host>[^\s#]+)(?:\s+slots\s*=\s*(?P<slots>\d+))?\s*$")


@dataclass(frozen=True)
class Host:
    name: str  # what ssh connects to, or Slurm's node name
    slots: int = 1  # how many workers it takes
    address: str = ""  # the address its nodes bind and advertise, when not `name`

    @property
    def addr(self) -> str:
        return self.address or self.name


def parse_hostfile(text: str, source: str = "hostfile") -> Tuple[Host, ...]:
    """Lines ``host slots=N`` (slots default 1); ``#`` comments and blank lines allowed."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if m and ":" in m.group("host"):
            raise LaunchError(f"{source} line {number}: {raw.strip()!r}: a hostfile line is "
                              "`HOST slots=N` (HOST:N is the inline form)")
        if not m or (m.group("slots") is not None and int(m.group("slots")) < 1):
            raise LaunchError(f"{source} line {number}: {raw.strip()!r} is not `HOST slots=N` "
                              "with N >= 1")
        hosts.append(Host(m.group("host"), int(m.group("slots") or 1)))
    if not hosts:
        raise LaunchError(f"{source} names no hosts")
    return no_repeats(hosts, source)


def parse_inline(text: str, flag: str = "-H") -> Tuple[Host, ...]:
    """``host1:2,host2:2`` (slots default 1)."""
    hosts = []
    count = "N" if flag == "--server-hosts" else "SLOTS"
    for part in text.split(","):
        name, colon, slots = part.strip().partition(":")
        if not name or (colon and (not slots.isdigit() or int(slots) < 1)):
            raise LaunchError(f"{flag} {text!r}: write HOST:{count},HOST:{count} ({count} >= 1; "
                              f"HOST alone means 1)")
        hosts.append(Host(name, int(slots or 1)))
    return no_repeats(hosts, f"{flag} {text!r}")


# what a hostfile's name ends with, never a host's: `-H hostz.txt` is a missing file
FILE_SUFFIXES = (".txt", ".hosts", ".hostfile", ".list", ".cfg", ".conf", ".ini", ".csv")


def read_hosts(arg: str, flag: str = "-H") -> Tuple[Tuple[Host, ...], str]:
    """``-H`` (or ``flag``): a hostfile or ``host1:2,host2:2`` (a single ``host`` too, when
    no such file exists and it looks like no path: no ``/``, no file suffix); returns (hosts,
    how to name them)."""
    looks_like_file = "/" in arg or arg.lower().endswith(FILE_SUFFIXES)
    if ":" in arg or "," in arg or (not looks_like_file and arg and not os.path.exists(arg)):
        return parse_inline(arg, flag), f"{flag} {arg}"
    try:
        with open(arg) as f:
            return parse_hostfile(f.read(), arg), arg
    except OSError as exc:
        raise LaunchError(f"{flag} {arg!r}: {exc.strerror}; give a hostfile or "
                          f"{'HOST:N' if flag == '--server-hosts' else 'HOST:SLOTS'},...") \
            from None


def no_repeats(hosts: List[Host], source: str, verb: str = "names",
               fix: str = "give") -> Tuple[Host, ...]:
    """``hosts`` as a tuple; LaunchError when ``source`` (a hostfile, -H, a discovery
    script) ``verb`` a host twice."""
    seen = set()
    for host in hosts:
        if host.name in seen:
            raise LaunchError(f"{source} {verb} host {host.name!r} twice; {fix} its slots once")
        seen.add(host.name)
    return tuple(hosts)


@dataclass(frozen=True)
class Placement:
    scheduler: Host
    servers: Tuple[Host, ...]
    workers: Tuple[Host, ...]  # in slot order
    local_ranks: Tuple[int, ...]  # each worker's index among the workers on its host


def place(hosts: Sequence[Host], num_workers: int, num_servers: int,
          source: str = "the hosts", server_hosts: Sequence[Host] = (),
          server_source: str = "--server-hosts") -> Placement:
    """Scheduler on the first host, workers filling each host's slots in order, servers
    round-robin over the hosts, or over ``server_hosts`` (each host's ``slots`` are then the
    servers it takes)."""
    total = sum(h.slots for h in hosts)
    if num_workers > total:
        raise LaunchError(f"-n {num_workers} exceeds the {total} slots in {source}; "
                          "lower -n or add hosts")
    workers, local = [], []
    for host in hosts:
        for i in range(min(host.slots, num_workers - len(workers))):
            workers.append(host)
            local.append(i)
    if server_hosts:
        servers = _round_robin(server_hosts, num_servers, server_source)
    else:
        servers = tuple(hosts[i % len(hosts)] for i in range(num_servers))
    return Placement(hosts[0], servers, tuple(workers), tuple(local))


def _round_robin(hosts: Sequence[Host], count: int, source: str) -> Tuple[Host, ...]:
    """``count`` places taken one per host in turn, each host at most ``slots`` times."""
    capacity = sum(h.slots for h in hosts)
    if count > capacity:
        raise LaunchError(f"-s {count} exceeds the {capacity} server slots in {source}; "
                          "lower -s or give more (HOST:N takes N servers)")
    taken: List[Host] = []
    left = {h.name: h.slots for h in hosts}
    while len(taken) < count:
        for host in hosts:
            if left[host.name] and len(taken) < count:
                taken.append(host)
                left[host.name] -= 1
    return tuple(taken)


def parse_slurm_tasks(nodes: Sequence[str], tasks_per_node: str,
                      addresses: Sequence[str] = ()) -> Tuple[Host, ...]:
    """Hosts of a Slurm allocation: node names and SLURM_TASKS_PER_NODE (``2(x3),1``)."""
    counts = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise LaunchError(f"cannot read SLURM_TASKS_PER_NODE={tasks_per_node!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    if len(counts) != len(nodes):
        raise LaunchError(f"SLURM_TASKS_PER_NODE={tasks_per_node!r} does not match the "
                          f"{len(nodes)} node(s) of the allocation")
    addresses = list(addresses) or [""] * len(nodes)
    return tuple(Host(n, c, a if a != n else "") for n, c, a in zip(nodes, counts, addresses))


def gpu_list(local_rank: int, gpus_per_worker: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a worker: its own consecutive GPUs on its host."""
    first = local_rank * gpus_per_worker
    return ",".join(str(g) for g in range(first, first + gpus_per_worker))
