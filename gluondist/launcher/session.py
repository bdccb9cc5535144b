"""The one launch path: ``gluondist launch`` and ``gluondist.launch()`` both end here.

``launch_job`` resolves the options (Slurm discovery, hostfiles, a GPU check), validates them
once, picks the transport (with the ssh preflight), creates the log directory, then runs each
attempt on fresh ports: plan, process group, monitor, teardown, report. It shows what a person
should see through ``show(text, note)`` (output lines prefixed ``[worker 1]``, with ps-lite's
routine chatter filtered; notes and reports as ``gluondist: ...`` with ``note=True``) and hands
every output line, filtered or not, to ``record(spec, line)``.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
from contextlib import ExitStack
from typing import Callable, Dict, List, Mapping, Optional

from .. import envvars as ev
from .errors import LaunchError, Stopped, StopRequest
from .hosts import parse_hostfile, parse_inline
from .monitor import (Joins, LaunchResult, is_pslite_chatter, rank_failures,
                      scheduler_port_taken, watch)
from .options import LaunchOptions
from .plan import LaunchPlan, ProcessSpec, build_plan, user_value
from .process import ProcessGroup
from .report import exit_line, failure_lines, final_lines
from .roles import pslite_verbose

PORT_ATTEMPTS = 3  # the scheduler's free port can be taken before it binds: retry twice
UNREACHABLE = ("ssh failed", "no answer")  # how ssh.check_host begins such a host's problem
Show = Callable[[str, bool], None]


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


def read_hosts(arg: str, flag: str = "-H"):
    """``-H`` (or ``flag``): a hostfile or ``host1:2,host2:2`` (a single ``host`` too, when
    no such file exists and it has no ``/``); returns (hosts, how to name them)."""
    if ":" in arg or "," in arg or ("/" not in arg and arg and not os.path.exists(arg)):
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
    if isinstance(options.hosts, str):  # -H as given: a hostfile or host1:2,host2:2
        hosts, source = read_hosts(options.hosts)
        options = dataclasses.replace(options, hosts=hosts, hosts_source=source)
    if isinstance(options.server_hosts, str):  # likewise, HOST:N for N servers
        hosts, source = read_hosts(options.server_hosts, "--server-hosts")
        options = dataclasses.replace(options, server_hosts=hosts, server_hosts_source=source)
    if options.launcher == "slurm":
        if options.hosts:
            raise LaunchError("--launcher slurm takes its hosts from the allocation; drop -H")
        from .transports.slurm import allocation_hosts
        options = dataclasses.replace(options, hosts=allocation_hosts(base_env),
                                      hosts_source="the Slurm allocation")
    options.validate()
    if options.launcher == "local" and options.gpus_per_worker:
        need, have = options.gpus_per_worker * options.num_workers, local_gpus()
        if need > have:
            raise LaunchError(f"--gpus-per-worker {options.gpus_per_worker} for "
                              f"{options.num_workers} worker(s) needs {need} GPU(s); this "
                              f"machine has {have}; lower it or use hosts with GPUs")
    return options


def local_gpus() -> int:
    """NVIDIA GPUs the driver lists (without importing MXNet or CUDA)."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def free_ports(count: int, host: str = "127.0.0.1") -> List[int]:
    """``count`` distinct ports the OS reports free right now. They are released before use, so
    one may be taken meanwhile: the scheduler's case is retried, a node's ps-lite re-picks."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]


def dry_run(options: LaunchOptions, base_env: Mapping[str, str], cores: int) -> LaunchPlan:
    options = resolve(options, base_env)
    port, *nodes = free_ports(options.num_processes, options.host)
    return build_plan(options, port, nodes, cores, base_env)


def launch_job(options: LaunchOptions, show: Show, keep_logs: bool = False,
               base_env: Optional[Mapping[str, str]] = None, cores: Optional[int] = None,
               transport=None, ports=free_ports,
               stop: Optional[StopRequest] = None) -> LaunchResult:
    """Run the job to its end, restarting it up to ``options.max_restarts`` times, and return
    the last attempt's result (its report already shown; with ``keep_logs`` its ``logs`` hold
    every output line of each process, by label, restarts' after the failed attempts'; the
    CLI does not keep them, so a long job's output never piles up in memory). Over ssh, each
    restart runs on the hosts that pass the preflight again (see ``_reachable``). Raises
    LaunchError for bad options before anything starts. ``stop`` (set by the CLI's signal
    handlers) stops every process, says which, and raises Stopped; so does any exception (a
    KeyboardInterrupt: a second one during the teardown does not cut it short), which then
    propagates."""
    base_env = os.environ if base_env is None else base_env
    cores = cores or os.cpu_count() or 1
    options = resolve(options, base_env)
    transport = _ready(options, base_env, transport, stop)
    shown = pslite_verbose(user_value(options, base_env, ev.PS_VERBOSE))[1]
    logs: Dict[str, List[str]] = {}
    on_line = _console(show, _keeper(logs) if keep_logs else None, hide_chatter=not shown)
    restarts, port_retries, failures = 0, 0, []
    every_host = (options.hosts, options.server_hosts)
    while True:
        if stop:
            raise Stopped(stop.signum)
        port, *node_ports = ports(options.num_processes, options.host)
        plan = build_plan(options, port, node_ports, cores, base_env, restarts)
        if restarts == port_retries == 0:
            for note in plan.notes:
                show(f"gluondist: {note}", True)
        result = _attempt(options, plan, on_line, transport, restarts, show, stop)
        result = dataclasses.replace(result, attempts=1 + restarts + port_retries, plan=plan,
                                     logs=logs)
        if result.exit_code != 0 and scheduler_port_taken(result) \
                and port_retries < PORT_ATTEMPTS - 1:
            show(f"gluondist: the scheduler's port {port} was taken; retrying on another", True)
            port_retries += 1
            continue
        if result.exit_code == 0 or restarts >= options.max_restarts:
            result = dataclasses.replace(result, restarts=failures)
            for line in final_lines(result):
                show(line, True)
            return result
        restarts += 1
        failures.append(result.failure)
        for line in failure_lines(result, f"attempt {result.attempts} failed: "):
            show(line, True)
        if options.launcher == "ssh":
            options = _reachable(options, every_host, result.attempts + 1, show)
            if options is None:
                result = dataclasses.replace(result, restarts=failures[:-1])
                show(exit_line(result), True)
                return result
        show(f"gluondist: restarting the job ({restarts} of {options.max_restarts})", True)


def _ready(options: LaunchOptions, base_env: Mapping[str, str], transport,
           stop: Optional[StopRequest]):
    """The log directory made and the transport chosen (over ssh: every host preflighted)."""
    if options.log_dir is not None:
        try:
            os.makedirs(options.log_dir, exist_ok=True)
        except OSError as exc:
            raise LaunchError(f"--log-dir {options.log_dir!r} cannot be created: "
                              f"{exc.strerror}") from None
    try:
        return transport or _transport(options, base_env)
    except LaunchError:
        if stop:  # Ctrl-C at the terminal also ends the preflight's ssh sessions
            raise Stopped(stop.signum) from None
        raise


def _reachable(options: LaunchOptions, every_host, attempt: int,
               show: Show) -> Optional[LaunchOptions]:
    """Before a restart over ssh: ``every_host`` (the job's -H hosts and server hosts, as
    first given) checked again (the preflight), those that fail it left out, each said so.
    The options on the hosts left, or None (said why) when their slots no longer hold -n
    workers, or the server hosts left no longer -s servers: neither is ever lowered (-n sets
    the global batch)."""
    from .transports.ssh import check_hosts
    hosts, server_hosts = every_host
    names = list(dict.fromkeys(h.name for h in (*hosts, *server_hosts)))
    problems = check_hosts(names, options.python, options.ssh_config)
    for name, problem in problems.items():
        what = "is unreachable" if problem.startswith(UNREACHABLE) else "fails its check"
        show(f"gluondist: host {name} {what} ({problem}): left out of attempt {attempt}", True)
    kept = tuple(h for h in hosts if h.name not in problems)
    kept_servers = tuple(h for h in server_hosts if h.name not in problems)
    for what, left, need, flag, fix in (
            ("slot(s)", kept, options.num_workers, "-n", "it sets the global batch"),
            ("server slot(s)", kept_servers if server_hosts else None, options.num_servers,
             "-s", "the layout is yours to change")):
        if left is not None and sum(h.slots for h in left) < need:
            show(f"gluondist: cannot restart: the hosts left have {sum(h.slots for h in left)} "
                 f"{what} for {flag} {need}; {flag} is never lowered ({fix}): bring the hosts "
                 "back or add some", True)
            return None
    return dataclasses.replace(options, hosts=kept, server_hosts=kept_servers)


def _attempt(options, plan, on_line, transport, restarts, show, stop) -> LaunchResult:
    joins = Joins(on_line)
    group = ProcessGroup(plan.specs, joins, options.log_dir, transport, restarts,
                         progress=options.stall_timeout is not None)
    result = None
    try:
        group.start()
        result = watch(plan, group, joins, options.start_timeout, options.stall_timeout, stop)
    finally:
        try:
            group.close()  # raises a second Ctrl-C once every process is down
        finally:
            stopped = group.stopped
            for label, pid, state in group.unreaped:
                show(f"gluondist: {label} (pid {pid}) did not die after SIGKILL, in state "
                     f"{state} (D: uninterruptible sleep, often a hung file system); left "
                     "behind", True)
            if (result is None or result.signal) and stopped:  # an interrupt: what it stopped
                show(f"gluondist: stopped {', '.join(s.label for s in stopped)}", True)
    if result.signal:
        raise Stopped(result.signal, [label for label, _, _ in group.unreaped],
                      transport.silence)
    return rank_failures(result, group, [s.label for s in stopped],
                         [label for label, _, _ in group.unreaped])


def _transport(options: LaunchOptions, base_env: Mapping[str, str]):
    if options.launcher == "ssh":
        from .transports.ssh import SshTransport, preflight
        preflight([h.name for h in options.all_hosts], options.python, options.ssh_config)
        return SshTransport(options.python, base_env, os.getcwd(), options.ssh_config)
    if options.launcher == "slurm":
        from .transports.slurm import SrunTransport
        return SrunTransport()
    from .transports.local import LocalTransport
    return LocalTransport()


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
