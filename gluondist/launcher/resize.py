"""How many workers each attempt of a job gets, and when an elastic job grows.

A job of ``-n N`` runs N workers on every attempt, or does not restart. An elastic job
(``-n MIN:MAX``, ``--host-discovery``) runs as many as the reachable slots hold, up to MAX, and
never fewer than MIN: at its start, at each restart after a failure (a shrink, when hosts were
lost), and when :class:`Grower` saw more slots appear and the workers stopped at a checkpoint
to let it grow. fit keeps the global batch of the run's first start whatever the count, so
the parameters do not depend on when hosts came and went.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Dict, Optional, Set, Tuple

from .discovery import EVERY
from .errors import LaunchError
from .hosts import Host
from .options import LaunchOptions
from .transports import Backend, Show


def slots(hosts) -> int:
    return sum(h.slots for h in hosts)


def _names(hosts) -> str:
    return ", ".join(f"{h.name}:{h.slots}" for h in hosts) or "none"


def workers_flag(job: LaunchOptions) -> str:
    return f"-n {job.fewest_workers}:{job.num_workers}" \
        if job.fewest_workers < job.num_workers else f"-n {job.num_workers}"


def rule(job: LaunchOptions, now: int) -> str:
    """How an elastic job sizes its attempts, in one line (for --dry-run)."""
    if not job.hosts and not job.host_discovery:  # this machine: its slots do not change
        return (f"elastic: {workers_flag(job)} on this machine runs {job.num_workers} workers "
                "on every attempt; fit keeps the global batch of the run's first start")
    text = (f"elastic: {workers_flag(job)} starts {now} worker(s) now (as many as the "
            f"reachable slots hold, at most {job.num_workers}); a restart runs as many as the "
            f"hosts that answer then hold, and stops below {job.fewest_workers}")
    if job.host_discovery:
        text += (f"; {job.host_discovery} runs every {EVERY:g}s, and when it lists more slots "
                 "the workers stop after their next checkpoint (an epoch's end, or a step "
                 "checkpoint of fit's checkpoint_every) and the job starts "
                 "again larger (not counted in --max-restarts)")
    return text + "; fit keeps the global batch of the run's first start"


def sized(job: LaunchOptions, options: LaunchOptions, kept, kept_servers
          ) -> Tuple[Optional[LaunchOptions], str]:
    """``options`` on the hosts ``kept`` and server hosts ``kept_servers`` (those the backend
    reaches now), with the worker count ``job`` (the options as given) allows there; or None
    and why not, in one phrase."""
    if job.server_hosts and slots(kept_servers) < job.num_servers:
        return None, (f"the server hosts left ({_names(kept_servers)}) have "
                      f"{slots(kept_servers)} server slot(s) for -s {job.num_servers}; -s is "
                      "never lowered (the layout is yours to change)")
    hosts = job.hosts or job.host_discovery
    if not job.elastic:
        if hosts and slots(kept) < job.num_workers:
            return None, (f"the hosts left have {slots(kept)} slot(s) for -n {job.num_workers}; "
                          "-n is never lowered (it sets the global batch): bring the hosts back, "
                          "add some, or give -n MIN:MAX")
        count = job.num_workers
    else:
        count = min(job.num_workers, slots(kept)) if hosts else job.num_workers
        if count < job.fewest_workers:
            return None, (f"{workers_flag(job)} needs at least {job.fewest_workers} worker(s); "
                          f"the hosts that answer ({_names(kept)}) hold {count}")
    return dataclasses.replace(options, hosts=kept, server_hosts=kept_servers,
                               num_workers=count), ""


def first(job: LaunchOptions, backend: Backend, show: Show) -> LaunchOptions:
    """An elastic job's first attempt: on the hosts that answer (the others named, one line
    each), with as many workers as they hold up to MAX; LaunchError, in one line naming the
    hosts that answered and those that did not, below MIN."""
    notes = []
    kept, kept_servers = backend.reachable(job.hosts, job.server_hosts, job, 1,
                                           lambda text, note: notes.append(text))
    options, why = sized(job, job, kept, kept_servers)
    if options is None:
        answered = {h.name for h in (*kept, *kept_servers)}
        gone = [h.name for h in (*job.hosts, *job.server_hosts) if h.name not in answered]
        gone = ", ".join(dict.fromkeys(gone))
        raise LaunchError(f"cannot start: {why}" +
                          (f"; left out (unreachable, or failing its check): {gone}"
                           if gone else ""))
    for text in notes:
        show(text, True)
    return options


STEADY = 3  # runs of the script in a row that list a new host before its slots count


class Grower:
    """While an attempt of a job with --host-discovery runs: when the hosts discovered hold
    more slots than it has workers, and fewer than MAX run, it asks the workers (once) to stop
    after their next checkpoint (an epoch's end, or a step checkpoint); the supervisor then
    starts the job again, larger. New hosts are checked by the backend first (once per
    attempt each), and the script is run once more right before asking (``recheck``: the
    supervisor gives its watch's ``run_now``, so a failure then is said by the watch's rule,
    and the listing just given holds): a host that is gone again by then asks nothing, so the
    job does not stop to start again with as many workers (issue 36, defect 9). A new host
    counts only once :data:`STEADY` runs in a row listed it, so one that flaps in and out
    never asks."""

    def __init__(self, job: LaunchOptions, backend: Backend, show: Show):
        self.job, self.backend, self.show = job, backend, show
        self.asked = threading.Event()  # the current attempt's workers were asked
        self._lock = threading.Lock()
        self._options: Optional[LaunchOptions] = None
        self._group = None
        self._attempt = 0
        self._checked: Set[str] = set()  # hosts checked during this attempt
        self._reached: Set[str] = set()  # of those, the ones that passed
        self._listed: Dict[str, int] = {}  # runs in a row that listed each host
        # the hosts the script lists now, or None when it fails; until the supervisor gives
        # its watch's, nothing can be checked again, and nothing is asked
        self.recheck: Callable[[], Optional[Tuple[Host, ...]]] = lambda: None

    def attach(self, options: LaunchOptions, group, attempt: int) -> None:
        with self._lock:
            self._options, self._group, self._attempt = options, group, attempt
            self._checked = {h.name for h in options.hosts}
            self._reached = set(self._checked)
            self.asked.clear()

    def detach(self) -> None:
        with self._lock:
            self._group = None

    def hosts_changed(self, hosts) -> None:
        """From the discovery thread: the script printed ``hosts`` (every run that worked)."""
        with self._lock:
            self._listed = {h.name: self._listed.get(h.name, 0) + 1 for h in hosts}
            options, group = self._options, self._group
            if group is None or self.asked.is_set() or options.num_workers >= self.job.num_workers:
                return
            new = tuple(h for h in hosts if h.name not in self._checked)
        if new:  # one that fails is said once, as left out of the attempt a grow would start
            kept, _ = self.backend.reachable(new, (), options, self._attempt + 1, self.show)
            with self._lock:
                self._checked |= {h.name for h in new}
                self._reached |= {h.name for h in kept}
        if self._count(hosts) <= options.num_workers:
            return
        now = self.recheck()  # still listed right before the workers are asked to stop?
        if now is None:  # a flaky script: the listing it just gave holds, steady as it is
            now = hosts
        with self._lock:
            self._listed = {h.name: self._listed.get(h.name, 0) for h in now}
        usable = self._usable(now)
        count = min(self.job.num_workers, slots(usable))
        if count <= options.num_workers:
            return
        with self._lock:
            if self._group is not group or self.asked.is_set():
                return
            self.asked.set()
            asked = group.request_resize()
        if asked:
            self.show(f"gluondist: the discovered hosts hold {slots(usable)} slot(s) "
                      f"({_names(usable)}): the job grows to {count} workers (was "
                      f"{options.num_workers}) after the workers' next checkpoint", True)
        else:
            self.show("gluondist: more slots were discovered, but the workers do not run "
                      "under gluondist's bootstrap (a SCRIPT.py or python -m) to stop at a "
                      "checkpoint: the job takes them at its next restart", True)

    def _usable(self, hosts) -> Tuple[Host, ...]:
        """Those of ``hosts`` the backend reached that the attempt runs on or that were
        listed :data:`STEADY` runs in a row."""
        running = {h.name for h in self._options.hosts} if self._options else set()
        return tuple(h for h in hosts if h.name in self._reached and (
            h.name in running or self._listed.get(h.name, 0) >= STEADY))

    def _count(self, hosts) -> int:
        """The workers ``hosts`` hold (see :meth:`_usable`), up to MAX."""
        return min(self.job.num_workers, slots(self._usable(hosts)))
