"""The one launch path: ``gluondist launch`` and ``gluondist.launch()`` both end here.

``launch_job`` resolves the options (hostfiles, the backend's host discovery and checks),
validates them once, makes the backend's transport (ssh preflights every host), creates the log
directory, then runs attempts on fresh ports, each a pipeline of values: plan, process group,
``watch`` (an Ending), teardown (a Teardown), ``diagnose`` (an Attempt), report; and
``next_step`` decides from each attempt whether the job is done, retries its port or restarts.
It shows what a person
should see through ``show(text, note)`` (output lines prefixed ``[worker 1]``, with ps-lite's
routine chatter filtered; notes and reports as ``gluondist: ...`` with ``note=True``) and hands
every output line, filtered or not, to ``record(spec, line)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import socket
import sys
import threading
from contextlib import ExitStack
from typing import Callable, Dict, List, Mapping, Optional

from .. import envvars as ev
from . import resize
from .discovery import Watcher, discover
from .errors import LaunchError, Stopped, StopRequest
from .hosts import parse_hostfile, parse_inline
from .monitor import Joins, watch
from .options import LaunchOptions
from .outcome import PORT_RETRIES, Attempt, Ending, Kind, LaunchResult, diagnose, restarted_from
from .plan import LaunchPlan, ProcessSpec, build_plan, user_value
from .process import ProcessGroup
from .pslite import is_pslite_chatter
from .report import exit_line, failure_lines, final_lines
from .roles import pslite_verbose
from .transports import Backend, Show, backend as backend_of



def terminal() -> Show:
    """The console both doors show the job on: process lines on stdout, the launcher's notes
    and reports on stderr, one locked write per line (lines from different processes never
    mix). A line the console cannot take (a gone terminal, ``| head``, a closed stdout, an
    encoding such as ``PYTHONIOENCODING=ascii`` that lacks its characters) is dropped, said
    once on stderr, and the job goes on: the logs keep every line."""
    lock = threading.Lock()
    told = []

    def show(text: str, note: bool) -> None:
        stream = sys.stderr if note else sys.stdout
        with lock:
            try:
                if stream is None:  # started with the descriptor closed (`>&-`)
                    raise OSError("it is closed")
                stream.write(text + "\n")
                stream.flush()
            except Exception as exc:  # noqa: BLE001 (any of them must not stop the job)
                if not note and not told:
                    told.append(exc)
                    _dropping(exc)
    return show


def _dropping(exc: Exception) -> None:
    try:
        sys.stderr.write(f"gluondist: the console cannot take an output line ({exc}); such "
                         "lines are dropped, --log-dir keeps them all\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 (no stderr either: the exit code still tells)
        pass


# what a hostfile's name ends with, never a host's: `-H hostz.txt` is a missing file
FILE_SUFFIXES = (".txt", ".hosts", ".hostfile", ".list", ".cfg", ".conf", ".ini", ".csv")


def read_hosts(arg: str, flag: str = "-H"):
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


def free_ports(count: int, host: str = "127.0.0.1") -> List[int]:
    """``count`` distinct ports the OS reports free right now. They are released before use, so
    one may be taken meanwhile: the scheduler's case is retried, a node's ps-lite re-picks."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]


def dry_run(options: LaunchOptions, base_env: Mapping[str, str], cores: int,
            show: Show = lambda text, note: None) -> LaunchPlan:
    """The plan the job would start now (an elastic job: on the hosts that answer now, each
    one left out said through ``show``), starting nothing."""
    job = resolve(options, base_env)
    options = resize.first(job, backend_of(job.launcher), show) if job.elastic else job
    port, *nodes = free_ports(options.num_processes, options.host)
    return build_plan(options, port, nodes, cores, base_env)


def launch_job(options: LaunchOptions, show: Show, keep_logs: bool = False,
               base_env: Optional[Mapping[str, str]] = None, cores: Optional[int] = None,
               transport=None, ports=free_ports,
               stop: Optional[StopRequest] = None) -> LaunchResult:
    """Run the job to its end, restarting it up to ``options.max_restarts`` times, and return
    its result, every attempt in it (the report already shown; with ``keep_logs`` its
    ``logs`` hold every output line of each process, by label, restarts' after the failed
    attempts'; the CLI does not keep them, so a long job's output never piles up in memory).
    Before a restart the backend says which hosts can take it (ssh preflights them again); an
    elastic job (``-n MIN:MAX``) then runs as many workers as they hold, and with
    ``--host-discovery`` also grows onto new hosts at an epoch end (see resize.py).
    Raises LaunchError for bad options before anything starts. ``stop`` (set by the CLI's
    signal handlers) stops every process, says which, and raises Stopped; so does any
    exception (a KeyboardInterrupt: a second one during the teardown does not cut it short),
    which then propagates."""
    base_env = os.environ if base_env is None else base_env
    cores = cores or os.cpu_count() or 1
    job = resolve(options, base_env)  # as given: num_workers is the most an attempt runs
    backend = backend_of(job.launcher)
    options = resize.first(job, backend, show) if job.elastic else job
    transport = _ready(options, backend, base_env, transport, stop)
    shown = pslite_verbose(user_value(options, base_env, ev.PS_VERBOSE))[1]
    logs: Dict[str, List[str]] = {}
    on_line = _console(show, _keeper(logs) if keep_logs else None, hide_chatter=not shown)
    grower = resize.Grower(job, backend, show) if job.host_discovery else None
    with _discovery(job, grower, show) as hosts_now:
        return _run(job, options, backend, transport, hosts_now, grower, ports, cores, base_env,
                    on_line, logs, show, stop)


def _run(job, options, backend, transport, hosts_now, grower, ports, cores, base_env, on_line,
         logs, show, stop) -> LaunchResult:
    """Attempts until one ends the job (see next_step)."""
    attempts: List[Attempt] = []
    while True:
        if stop:
            raise Stopped(stop.signum)
        restarts = len(restarted_from(attempts))  # the failed attempts restarted from
        port, *node_ports = ports(options.num_processes, options.host)
        plan = build_plan(options, port, node_ports, cores, base_env, restarts)
        if not attempts:
            for note in plan.notes:
                show(f"gluondist: {note}", True)
        attempt = _attempt(options, plan, on_line, transport, restarts, show, stop, grower,
                           len(attempts) + 1)
        attempts.append(attempt)
        result = LaunchResult(tuple(attempts), logs)
        step = next_step(result, job.max_restarts)
        if step is Step.RETRY_PORT:
            show(f"gluondist: the scheduler's port {port} was taken; retrying on another", True)
            continue
        if step is Step.FINISH:
            if grower is not None and grower.asked.is_set() and attempt.failure is None:
                show("gluondist: the job ended before its workers reached an epoch end to "
                     "stop at: it did not grow", True)
            for line in final_lines(result, _also_lost(result.last, backend, options)):
                show(line, True)
            return result
        if step is Step.RESTART:
            for line in failure_lines(attempt, f"attempt {len(attempts)} failed: "):
                show(line, True)
        was = options.num_workers
        options = _restartable(job, options, backend, hosts_now(), len(attempts) + 1, show,
                               lost=_lost_hosts(attempt) if step is Step.RESTART else ())
        if options is None:
            show(exit_line(result), True)
            return result
        show(_restart_line(job, step, attempt, was, options.num_workers, restarts), True)


def _restart_line(job: LaunchOptions, step: "Step", attempt: Attempt, was: int, now: int,
                  restarts: int) -> str:
    if step is Step.GROW:
        return (f"gluondist: growing the job to {now} workers (was {was}); it resumes from "
                "its last checkpoint")
    count = f"restarting the job ({restarts + 1} of {job.max_restarts})"
    if now == was:
        return f"gluondist: {count}"
    f = attempt.failure
    why = f"host {f.host} lost" if f.lost else f"{f.label or 'the job'} failed"
    return f"gluondist: {why}; {count} with {now} workers (was {was})"


def _also_lost(attempt: Attempt, backend: Backend, options: LaunchOptions) -> Dict[str, str]:
    """When a lost host ended the job: the attempt's other hosts that no longer answer either
    (their processes were only "stopped" from here; a rack failure is more than one host)."""
    if attempt.failure is None or not attempt.failure.lost or attempt.plan is None:
        return {}
    named = _lost_hosts(attempt)
    others = [h for h in dict.fromkeys(s.host for s in attempt.plan.specs) if h not in named]
    return backend.unreachable(others, options) if others else {}


def _lost_hosts(attempt: Attempt) -> set:
    return {f.host for f in (attempt.failure, *attempt.others) if f is not None and f.lost}


@contextlib.contextmanager
def _discovery(job: LaunchOptions, grower, show: Show):
    """Yields what gives the hosts a restart may use now: those of ``job`` (as first given), or
    with --host-discovery those its script printed last, watched while the job runs."""
    if job.host_discovery is None:
        yield lambda: (job.hosts, job.server_hosts)
        return
    watcher = Watcher(job.host_discovery, job.hosts, grower.hosts_changed,
                      lambda text: show(f"gluondist: {text}", True))
    with watcher:
        yield lambda: (watcher.latest(), job.server_hosts)


class Step(enum.Enum):
    FINISH = "finish"  # report the result and return it
    RETRY_PORT = "retry on another port"  # the scheduler's port was taken: not a restart
    RESTART = "restart"  # start the whole job again, on fresh ports
    GROW = "grow"  # the workers stopped at an epoch end to start again with more: no restart


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


def _ready(options: LaunchOptions, backend: Backend, base_env: Mapping[str, str], transport,
           stop: Optional[StopRequest]):
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


def _restartable(job: LaunchOptions, options: LaunchOptions, backend: Backend, every_host,
                 attempt: int, show: Show, lost=()) -> Optional[LaunchOptions]:
    """Before another attempt: ``every_host`` (the job's hosts and server hosts, as first
    given or as discovered now) as the backend finds them now (ssh leaves out those that fail
    its preflight, each said so), and the worker count they allow (resize.sized); or None,
    said why, when they allow none: -s is never lowered, nor -n below its MIN. An elastic job
    leaves the hosts it just ``lost`` out unchecked when the others are enough (a cut-off host
    would hold the restart up for ssh's connect timeout); they rejoin at a later restart, or
    when --host-discovery lists them."""
    hosts, server_hosts = every_host
    lost = set(lost) if job.elastic else set()
    kept, kept_servers = backend.reachable(_hosts(hosts, lost, False),
                                           _hosts(server_hosts, lost, False), options, attempt,
                                           show)
    if lost:
        options_now, _ = resize.sized(job, options, kept, kept_servers)
        if options_now is not None:
            for name in sorted(lost):
                show(f"gluondist: host {name} was lost: left out of attempt {attempt}", True)
            return options_now
        # not enough without them: check the lost hosts too (the others were checked above)
        back, back_servers = backend.reachable(_hosts(hosts, lost, True),
                                               _hosts(server_hosts, lost, True), options,
                                               attempt, show)
        named = {h.name for h in (*kept, *kept_servers, *back, *back_servers)}
        kept, kept_servers = (tuple(h for h in given if h.name in named)
                              for given in (hosts, server_hosts))
    options, why = resize.sized(job, options, kept, kept_servers)
    if options is None:
        show(f"gluondist: cannot restart: {why}", True)
    return options


def _hosts(hosts, names, inside: bool) -> tuple:
    """Those of ``hosts`` whose name is (``inside``) or is not among ``names``, in order."""
    return tuple(h for h in hosts if (h.name in names) == inside)


def _attempt(options, plan, on_line, transport, restarts, show, stop, grower,
             number: int) -> Attempt:
    """Attempt ``number``, start to teardown, diagnosed. A stop request is raised as Stopped
    once every process is down. ``grower`` (or None) may ask the workers to stop to grow."""
    joins = Joins(on_line)
    group = ProcessGroup(plan.specs, joins, options.log_dir, transport, restarts,
                         progress=options.stall_timeout is not None)
    resizing = grower.asked if grower is not None else None
    ending: Optional[Ending] = None
    try:
        group.start()
        if grower is not None:
            grower.attach(options, group, number)
        ending = watch(plan, group, joins, options.start_timeout, options.stall_timeout, stop,
                       resizing)
    finally:
        if grower is not None:
            grower.detach()
        try:
            teardown = group.close()  # raises a second Ctrl-C once every process is down
        finally:
            _say_teardown(group.unreaped, group.stopped, ending, show)
    attempt = diagnose(plan, ending, teardown, group.ends(),
                       asked_to_resize=resizing is not None and resizing.is_set())
    if attempt.signal:
        raise Stopped(attempt.signal, attempt.unreaped, transport.silence)
    return attempt


def _say_teardown(unreaped, stopped, ending: Optional[Ending], show: Show) -> None:
    for u in unreaped:
        show(f"gluondist: {u.label} (pid {u.pid}) did not die after SIGKILL, in state "
             f"{u.state} (D: uninterruptible sleep, often a hung file system); left behind",
             True)
    interrupted = ending is None or ending.signum is not None
    if interrupted and stopped:  # an interrupt: what it stopped
        show(f"gluondist: stopped {', '.join(s.label for s in stopped)}", True)


def _keeper(logs: Dict[str, List[str]]) -> Callable[[ProcessSpec, str], None]:
    lock = threading.Lock()  # each process's output is read by a thread of its own

    def keep(spec: ProcessSpec, line: str) -> None:
        with lock:
            logs.setdefault(spec.label, []).append(line)
    return keep


def _console(show: Show, record, hide_chatter: bool) -> Callable[[ProcessSpec, str], None]:
    def on_line(spec: ProcessSpec, line: str) -> None:
        if record is not None:
            record(spec, line)
        if not (hide_chatter and is_pslite_chatter(line)):
            show(f"[{spec.label}] {line}", False)
    return on_line
