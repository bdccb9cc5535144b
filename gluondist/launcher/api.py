"""``gluondist.launch()``: start a parameter-server job from Python (a notebook, a test)."""
from __future__ import annotations

import os
import sys
import threading
from typing import Dict, List, Optional, Sequence, Union

from .monitor import LaunchResult, run
from .options import LaunchOptions
from .plan import ProcessSpec


def launch(command: Union[str, Sequence[str]], *args: str, num_workers: int = 1,
           num_servers: int = 1, kvstore: str = "dist_sync", log_dir: Optional[str] = None,
           env: Optional[Dict[str, str]] = None, start_timeout: float = 300.0,
           threads: Optional[int] = None, max_restarts: int = 0,
           echo: bool = True) -> LaunchResult:
    """Run ``command`` (a ``.py`` script, or a command as a list) with ``args`` as a job of
    ``num_workers`` workers and ``num_servers`` servers on this machine, and wait for it.

    Returns a LaunchResult: ``exit_code`` (0, the first failing worker's code, or 128+N for
    signal N), ``failure`` (who failed first and why, with its last lines), ``restarts`` (the
    failures restarted from) and ``logs`` (each process's output lines, by label such as
    ``'worker 0'``; a restarted job's lines follow the failed attempt's). ``echo`` prints the
    lines as they come, prefixed with the process. Raises LaunchError for bad options before
    anything starts; an interrupt stops the whole job and propagates."""
    cmd = [command] if isinstance(command, str) else list(command)
    options = LaunchOptions(tuple(cmd) + tuple(args), num_workers, num_servers, kvstore,
                            start_timeout=start_timeout, log_dir=log_dir, env=env or {},
                            threads=threads, max_restarts=max_restarts)
    logs: Dict[str, List[str]] = {}
    lock = threading.Lock()

    def on_line(spec: ProcessSpec, line: str) -> None:
        with lock:
            logs.setdefault(spec.label, []).append(line)
            if echo:
                print(f"[{spec.label}] {line}", file=sys.stdout, flush=True)

    result = run(options, on_line, cores=os.cpu_count() or 1, base_env=os.environ)
    result.logs = logs
    return result
