"""``gluondist.launch()``: start a parameter-server job from Python (a notebook, a test)."""
from __future__ import annotations

from dataclasses import fields
from typing import Dict, Optional, Sequence, Tuple, Union

from .errors import LaunchError
from .outcome import LaunchResult
from .options import LaunchOptions
from .console import terminal
from .supervisor import launch_job


def launch(command: Union[str, Sequence[str]], *args: str,
           num_workers: Union[int, Tuple[int, int]] = 1,
           num_servers: int = 1, kvstore: str = "dist_sync", log_dir: Optional[str] = None,
           env: Optional[Dict[str, str]] = None, start_timeout: float = 300.0,
           threads: Optional[int] = None, max_restarts: int = 0,
           stall_timeout: Optional[float] = None, launcher: str = "local",
           hosts: Union[str, Tuple] = (), echo: bool = True, **more) -> LaunchResult:
    """Run ``command`` (a ``.py`` script, or a command as a list) with ``args`` as a job of
    ``num_workers`` workers (``(MIN, MAX)`` for an elastic job, as ``-n MIN:MAX``) and
    ``num_servers`` servers, and wait for it. The same path as
    ``gluondist launch``: the same options (``more`` takes the rest of LaunchOptions' fields,
    such as ``gpus_per_worker``), the same console, the same reports.

    Returns a LaunchResult: ``exit_code`` (0; else the failing process's own code, 128+N for
    signal N, 75 for a lost host, 124 for a stall, 1 for a start timeout: see
    ``outcome.Failure.exit_code``), ``failure`` (who failed first and why, its ``kind`` an
    ``outcome.Kind``, with its traceback or last lines), ``others`` (later failures),
    ``stall`` (the workers' stacks when it stalled), ``attempts`` (every start of the job, each
    with its plan, failure, ``workers`` and why it ``ended``), ``restarts`` (the failures
    restarted from), ``grows`` (the times an elastic job stopped to grow) and
    ``logs`` (every output line of each process,
    ps-lite's included, by label such as ``'worker 0'``; a restarted job's lines follow the
    failed attempt's). ``echo`` shows what the CLI shows: output lines prefixed with the
    process on stdout, the launcher's notes and reports on stderr. Raises LaunchError for bad
    options before anything starts; an interrupt stops the whole job and propagates."""
    unknown = sorted(set(more) - {f.name for f in fields(LaunchOptions)})
    if unknown:
        raise LaunchError(f"launch() got unknown option(s) {', '.join(unknown)}; it takes "
                          "LaunchOptions' fields (see help(gluondist.LaunchOptions))")
    cmd = [command] if isinstance(command, str) else list(command)
    options = LaunchOptions(tuple(cmd) + tuple(args), num_workers=num_workers,
                            num_servers=num_servers, kvstore=kvstore, start_timeout=start_timeout,
                            log_dir=log_dir, env=env or {}, threads=threads,
                            max_restarts=max_restarts, stall_timeout=stall_timeout,
                            launcher=launcher, hosts=hosts, **more)
    show = terminal() if echo else (lambda text, note: None)
    return launch_job(options, show, keep_logs=True)
