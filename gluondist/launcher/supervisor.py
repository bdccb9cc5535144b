"""The one launch path: ``gluondist launch`` and ``gluondist.launch()`` both end here.

``launch_job`` resolves the options (hostfiles, the backend's host discovery and checks),
validates them once, makes the backend's transport (ssh preflights every host), creates the log
directory, and hands the job to a :class:`Supervisor`, which runs attempts on fresh ports, each
a pipeline of values: plan, process group, ``watch`` (an Ending), teardown (a Teardown),
``diagnose`` (an Attempt), report; and ``next_step``, a pure function, decides from each
attempt whether the job is done, retries its port, restarts or grows. What a person sees goes
through the job's console (console.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
from typing import Callable, Dict, List, Mapping, Optional

from .. import envvars as ev
from . import resize
from .console import Console
from .discovery import Watcher, discover
from .errors import LaunchError, Stopped, StopRequest
from .hosts import read_hosts
from .monitor import Joins, watch
from .options import LaunchOptions
from .outcome import PORT_RETRIES, Attempt, Ending, Kind, LaunchResult, diagnose, restarted_from
from .plan import LaunchPlan, build_plan, environment_note, user_value
from .ports import free_ports
from .process import ProcessGroup
from .report import exit_line, failure_lines, final_lines, left_lines
from .roles import pslite_verbose
from .transports import Backend, Show, Transport, backend as backend_of

Ports = Callable[[int, str], List[int]]  # (count, host) -> that many free ports


def resolve(options: LaunchOptions, base_env: Mapping[str, str]) -> LaunchOptions:
    """The options with the Slurm allocation's hosts filled in, validated (once), and checked
    against this machine's GPUs. Changes nothing on disk."""
    if options.host_discovery is not None and options.hosts:
        raise LaunchError("--host-discovery gives the hosts instead of -H: drop one of them")
    if isinstance(options.hosts, str):  # -H as given: a hostfile or host1:2,host2:2
        hosts, source = read_hosts(options.hosts)
        options = dataclasses.replace(options, hosts=hosts, hosts_source=source)
    if options.host_discovery is not None:
        options = dataclasses.replace(options, hosts=discover(options.host_discovery),
                                      hosts_source=f"--host-discovery {options.host_discovery}")
    if isinstance(options.server_hosts, str):  # likewise, HOST:N for N servers
        hosts, source = read_hosts(options.server_hosts, "--server-hosts")
        options = dataclasses.replace(options, server_hosts=hosts, server_hosts_source=source)
    backend = backend_of(options.launcher)
    backend.check_elastic(options)
    options = backend.discover(options, base_env)
    options.validate()
    backend.check_resources(options)
    return options


def dry_run(options: LaunchOptions, base_env: Mapping[str, str], cores: int,
            show: Show = lambda text, note: None) -> LaunchPlan:
    """The plan the job would start now (an elastic job: on the hosts that answer now, each
    one left out said through ``show``), starting nothing."""
    job = resolve(options, base_env)
    _note_environment(job, base_env, show)
    options = resize.first(job, backend_of(job.launcher), show) if job.elastic else job
    port, *nodes = free_ports(options.num_processes, options.host)
    return build_plan(options, port, nodes, cores, base_env)


def launch_job(options: LaunchOptions, show: Show, keep_logs: bool = False,
               base_env: Optional[Mapping[str, str]] = None, cores: Optional[int] = None,
               transport: Optional[Transport] = None, ports: Ports = free_ports,
               stop: Optional[StopRequest] = None) -> LaunchResult:
    """Run the job to its end, restarting it up to ``options.max_restarts`` times, and return
    its result, every attempt in it (the report already shown; with ``keep_logs`` its
    ``logs`` hold every output line of each process, by label, restarts' after the failed
    attempts'; the CLI does not keep them, so a long job's output never piles up in memory).
    Before a restart the backend says which hosts can take it (ssh preflights them again); an
    elastic job (``-n MIN:MAX``) then runs as many workers as they hold, and with
    ``--host-discovery`` also grows onto new hosts at the next checkpoint (see resize.py).
    Raises LaunchError for bad options before anything starts. ``stop`` (set by the CLI's
    signal handlers) stops every process, says which, and raises Stopped; so does any
    exception (a KeyboardInterrupt: a second one during the teardown does not cut it short),
    which then propagates."""
    base_env = os.environ if base_env is None else base_env
    cores = cores or os.cpu_count() or 1
    job = resolve(options, base_env)  # as given: num_workers is the most an attempt runs
    _note_environment(job, base_env, show)  # before anything starts (ssh's preflight too)
    backend = backend_of(job.launcher)
    options = resize.first(job, backend, show) if job.elastic else job
    transport = _ready(options, backend, base_env, transport, stop)
    shown = pslite_verbose(user_value(options, base_env, ev.PS_VERBOSE))[1]
    console = Console(show, keep_logs, hide_chatter=not shown)
    grower = resize.Grower(job, backend, show) if job.host_discovery else None
    return Supervisor(job, options, backend, transport, console, grower, stop,
                      base_env=base_env, cores=cores, ports=ports).run()


class Step(enum.Enum):
    FINISH = "finish"  # report the result and return it
    RETRY_PORT = "retry on another port"  # the scheduler's port was taken: not a restart
    RESTART = "restart"  # start the whole job again, on fresh ports
    GROW = "grow"  # the workers stopped at a checkpoint to start again with more: no restart


def next_step(result: LaunchResult, max_restarts: int) -> Step:
    """What the job does after its last attempt: the launcher's control loop, as one rule."""
    if result.last.resized:
        return Step.GROW
    failure = result.failure
    if failure is None or failure.kind is Kind.STOPPED:
        return Step.FINISH
    if failure.kind is Kind.PORT_TAKEN and result.port_retries < PORT_RETRIES:
        return Step.RETRY_PORT
    return Step.RESTART if len(result.restarts) < max_restarts else Step.FINISH


class Supervisor:
    """One job's attempts, the way torchelastic's SimpleElasticAgent runs its workers: one
    object holds what every attempt shares, methods run one attempt each (``attempt``) and
    size the next (``restartable``), and the pure :func:`next_step` decides between them.

    It owns ``job`` (the options as resolved: num_workers is the most an attempt runs),
    ``options`` (the current attempt's: its hosts and worker count), the ``backend`` and its
    ``transport``, the ``grower`` (with --host-discovery; else None), the ``console`` (and
    the ``logs`` it keeps), the ``stop`` request, and the ``attempts`` so far."""

    def __init__(self, job: LaunchOptions, options: LaunchOptions, backend: Backend,
                 transport: Transport, console: Console,
                 grower: Optional[resize.Grower] = None, stop: Optional[StopRequest] = None,
                 *, base_env: Mapping[str, str], cores: int, ports: Ports = free_ports):
        self.job, self.options, self.backend, self.transport = job, options, backend, transport
        self.console, self.grower, self.stop = console, grower, stop
        self.base_env, self.cores, self.ports = base_env, cores, ports
        self.attempts: List[Attempt] = []

    @property
    def logs(self) -> Dict[str, List[str]]:
        return self.console.logs

    @property
    def result(self) -> LaunchResult:
        return LaunchResult(tuple(self.attempts), self.logs)

    def run(self) -> LaunchResult:
        """Attempts until one ends the job (see next_step); its result."""
        with self._discovery() as hosts_now:
            while True:
                if self.stop:
                    raise Stopped(self.stop.signum)
                number = len(self.attempts)  # this attempt's index: its logs and RESTART_COUNT
                restarts = len(restarted_from(self.attempts))  # the failed attempts restarted from
                port, *node_ports = self.ports(self.options.num_processes, self.options.host)
                plan = build_plan(self.options, port, node_ports, self.cores, self.base_env,
                                  number)
                if not self.attempts:
                    for note in plan.notes:
                        self.console.note(note)
                attempt = self.attempt(plan, number)
                self.attempts.append(attempt)
                result = self.result
                step = next_step(result, self.job.max_restarts)
                if step is Step.RETRY_PORT:
                    taken = f"the scheduler's port {port} was taken; retrying on another"
                    self.console.note(taken)
                    continue
                if step is Step.FINISH:
                    result = self._stop_left()
                    self._finish(result)
                    return result
                if step is Step.RESTART:
                    self.console.report(failure_lines(attempt,
                                                      f"attempt {len(self.attempts)} failed: "))
                was = self.options.num_workers
                options = self.restartable(hosts_now(), lost=_lost_hosts(attempt)
                                           if step is Step.RESTART else ())
                if options is None:
                    result = self._stop_left()
                    self.console.report(left_lines(result))
                    self.console.show(exit_line(result), True)
                    return result
                self.options = options
                self.console.show(_restart_line(self.job, step, attempt, was,
                                                options.num_workers, restarts), True)

    def attempt(self, plan: LaunchPlan, number: int) -> Attempt:
        """The next attempt of ``plan`` (``number``: its index, 0 for the first, which names
        its logs), start to teardown, diagnosed. A stop request is raised as Stopped once every
        process is down. The grower (if any) may ask the workers to stop to grow meanwhile."""
        options, grower = self.options, self.grower
        joins = Joins(self.console.line)
        group = ProcessGroup(plan.specs, joins, options.log_dir, self.transport, number,
                             progress=options.stall_timeout is not None)
        resizing = grower.asked if grower is not None else None
        ending: Optional[Ending] = None
        try:
            group.start()
            if grower is not None:
                grower.attach(options, group, len(self.attempts) + 1)
            ending = watch(plan, group, joins, options.start_timeout, options.stall_timeout,
                           self.stop, resizing)
        finally:
            if grower is not None:
                grower.detach()
            try:
                teardown = group.close()  # raises a second Ctrl-C once every process is down
            finally:
                self.console.teardown(group.unreaped, group.stopped, ending)
        attempt = diagnose(plan, ending, teardown, group.ends(),
                           asked_to_resize=resizing is not None and resizing.is_set())
        if attempt.signal:
            raise Stopped(attempt.signal, attempt.unreaped, self.transport.silence)
        return attempt

    def _stop_left(self) -> LaunchResult:
        """The job ends (not before its far sides do): what it still runs on the hosts its last
        attempt lost is stopped from here and waited for, or said to be out of reach, in that
        attempt's report. A restart does not wait for it: the far sides end by themselves, and
        an elastic restart leaves a lost host out unchecked so as not to wait for a timeout."""
        lost = sorted(_lost_hosts(self.attempts[-1]))
        if lost:
            self.attempts[-1] = dataclasses.replace(
                self.attempts[-1], left_on_lost=tuple(self.transport.stop_left(lost).items()))
        return self.result

    def restartable(self, every_host, lost=()) -> Optional[LaunchOptions]:
        """Before the next attempt: ``every_host`` (the job's hosts and server hosts, as first
        given or as discovered now) as the backend finds them now (ssh leaves out those that
        fail its preflight, each said so), and the worker count they allow (resize.sized); or
        None, said why, when they allow none: -s is never lowered, nor -n below its MIN. An
        elastic job leaves the hosts it just ``lost`` out unchecked when the others are enough
        (a cut-off host would hold the restart up for ssh's connect timeout); they rejoin at a
        later restart, or when --host-discovery lists them."""
        job, options, backend = self.job, self.options, self.backend
        number, show = len(self.attempts) + 1, self.console.show
        hosts, server_hosts = every_host
        lost = set(lost) if job.elastic else set()
        kept, kept_servers = backend.reachable(_hosts(hosts, lost, False),
                                               _hosts(server_hosts, lost, False), options,
                                               number, show)
        if lost:
            options_now, _ = resize.sized(job, options, kept, kept_servers)
            if options_now is not None:
                for name in sorted(lost):
                    self.console.note(f"host {name} was lost: left out of attempt {number}")
                return options_now
            # not enough without them: check the lost hosts too (the others were checked above)
            back, back_servers = backend.reachable(_hosts(hosts, lost, True),
                                                   _hosts(server_hosts, lost, True), options,
                                                   number, show)
            named = {h.name for h in (*kept, *kept_servers, *back, *back_servers)}
            kept, kept_servers = (tuple(h for h in given if h.name in named)
                                  for given in (hosts, server_hosts))
        options, why = resize.sized(job, options, kept, kept_servers)
        if options is None:
            self.console.note(f"cannot restart: {why}")
        return options

    def _finish(self, result: LaunchResult) -> None:
        """The job's end, reported."""
        if self.grower is not None and self.grower.asked.is_set() and result.last.failure is None:
            self.console.note("the job ended before its workers reached a checkpoint to stop "
                              "at: it did not grow")
        self.console.report(final_lines(result, self._also_lost(result.last)))

    def _also_lost(self, attempt: Attempt) -> Dict[str, str]:
        """When a lost host ended the job: the attempt's other hosts that no longer answer
        either (their processes were only "stopped" from here; a rack failure is more than one
        host)."""
        if attempt.failure is None or not attempt.failure.lost or attempt.plan is None:
            return {}
        named = _lost_hosts(attempt)
        others = [h for h in dict.fromkeys(s.host for s in attempt.plan.specs) if h not in named]
        return self.backend.unreachable(others, self.options) if others else {}

    @contextlib.contextmanager
    def _discovery(self):
        """Yields what gives the hosts a restart may use now: those of ``job`` (as first
        given), or with --host-discovery those its script prints at that moment (those it
        printed last if it fails then), watched while the job runs. The grower checks a
        listing again through the same watch, so a failing script is said by one rule."""
        job = self.job
        if job.host_discovery is None:
            yield lambda: (job.hosts, job.server_hosts)
            return
        watcher = Watcher(job.host_discovery, job.hosts, self.grower.hosts_changed,
                          self.console.note)
        self.grower.recheck = watcher.run_now
        with watcher:
            yield lambda: (watcher.refresh(), job.server_hosts)


def _restart_line(job: LaunchOptions, step: Step, attempt: Attempt, was: int, now: int,
                  restarts: int) -> str:
    if step is Step.GROW and now <= was:  # the hosts that made it stop are gone again
        return (f"gluondist: the discovered hosts no longer hold more slots than the job's "
                f"{was} workers: starting it again with {now}; it resumes from its last "
                "checkpoint")
    if step is Step.GROW:
        return (f"gluondist: growing the job to {now} workers (was {was}); it resumes from "
                "its last checkpoint")
    count = f"restarting the job ({restarts + 1} of {job.max_restarts})"
    if now == was:
        return f"gluondist: {count}"
    f = attempt.failure
    why = f"host {f.host} lost" if f.lost else f"{f.label or 'the job'} failed"
    return f"gluondist: {why}; {count} with {now} workers (was {was})"


def _lost_hosts(attempt: Attempt) -> set:
    return {f.host for f in (attempt.failure, *attempt.others) if f is not None and f.lost}


def _hosts(hosts, names, inside: bool) -> tuple:
    """Those of ``hosts`` whose name is (``inside``) or is not among ``names``, in order."""
    return tuple(h for h in hosts if (h.name in names) == inside)


def _note_environment(job: LaunchOptions, base_env: Mapping[str, str], show: Show) -> None:
    note = environment_note(job, base_env)
    if note is not None:
        show(f"gluondist: {note}", True)


def _ready(options: LaunchOptions, backend: Backend, base_env: Mapping[str, str],
           transport: Optional[Transport], stop: Optional[StopRequest]) -> Transport:
    """The log directory made and the transport made (over ssh: every host preflighted)."""
    if options.log_dir is not None:
        try:
            os.makedirs(options.log_dir, exist_ok=True)
        except OSError as exc:
            raise LaunchError(f"--log-dir {options.log_dir!r} cannot be created: "
                              f"{exc.strerror}") from None
    try:
        return transport or backend.transport(options, base_env)
    except LaunchError:
        if stop:  # Ctrl-C at the terminal also ends the preflight's ssh sessions
            raise Stopped(stop.signum) from None
        raise
