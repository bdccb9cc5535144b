"""``gluondist.launch()``: start a parameter-server job from Python (a notebook, a test)."""
from __future__ import annotations

import os
from dataclasses import fields
from typing import Sequence, Union

from .errors import LaunchError
from .outcome import LaunchResult
from .options import LaunchOptions, from_environment
from .console import terminal
from .supervisor import launch_job


def launch(command: Union[str, Sequence[str]], *args: str, echo: bool = True,
           **options) -> LaunchResult:
    """Run ``command`` (a ``.py`` script, or a command as a list) with ``args`` as a job, and
    wait for it. The same path as ``gluondist launch``: ``options`` are LaunchOptions' fields
    (``num_workers=2``, ``(MIN, MAX)`` for an elastic job as ``-n MIN:MAX``;
    ``num_servers``, ``kvstore``, ``log_dir``, ``env``, ``max_restarts``, ``launcher``,
    ``hosts``, ``gpus_per_worker``, ...), each taken as the CLI takes its flag: an argument
    given here wins (None counts as not given), else the flag's environment variable
    (``GLUONDIST_NUM_WORKERS``, ...), else LaunchOptions' default. The same console, the
    same reports.

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
    options (or a bad option variable) before anything starts; an interrupt stops the whole
    job and propagates."""
    unknown = sorted(set(options) - {f.name for f in fields(LaunchOptions)})
    if unknown:
        raise LaunchError(f"launch() got unknown option(s) {', '.join(unknown)}; it takes "
                          "LaunchOptions' fields (see help(gluondist.LaunchOptions))")
    if "env" in options and options["env"] is None:  # env=None: no pairs, as always
        options["env"] = {}
    # None is "not given", as a wrapper passing on its own None defaults means it: the
    # option's variable, else its default
    options = {name: value for name, value in options.items() if value is not None}
    cmd = [command] if isinstance(command, str) else list(command)
    job = from_environment(tuple(cmd) + tuple(args), options, os.environ)
    show = terminal() if echo else (lambda text, note: None)
    return launch_job(job, show, keep_logs=True)
