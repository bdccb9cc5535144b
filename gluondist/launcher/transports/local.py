"""The local transport: a spec started as a child process of the launcher, on this machine."""
from __future__ import annotations

import os
import subprocess
from contextlib import nullcontext
from typing import Mapping, Optional, Tuple

from ... import elastic, envvars as ev
from ..child.proctree import STACK_SIGNAL, holding, kill_quietly, session_cpu
from ..errors import LaunchError
from ..plan import ProcessSpec
from ..roles import runs_bootstrap
from . import Backend, Transport


class LocalTransport(Transport):
    """Starts a spec on this machine (see transports.Transport): with ``progress`` the worker
    inherits a pipe's write end named by GLUONDIST_PROGRESS_FD, its side channel;
    ``error_file`` is where its bootstrap records an exception. A process under the worker
    bootstrap starts with gluondist.elastic's signal held, as the ssh remote side starts it:
    a grow request sent before the bootstrap's handler exists waits for it (its default
    action would end the worker: issue 36, defect 8)."""

    error_records = tree_cpu_known = True  # no link to lose: silence 0, never lost()

    def spawn(self, spec: ProcessSpec, progress: bool = False,
              error_file: Optional[str] = None) -> Tuple[subprocess.Popen, Optional[object]]:
        env = {**os.environ, **spec.env}
        if error_file:
            env[ev.GLUONDIST_ERROR_FILE] = error_file
        held = holding(elastic.SIGNAL) if runs_bootstrap(spec.argv) else nullcontext()
        if not progress:
            with held:
                return subprocess.Popen(list(spec.argv), env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        start_new_session=True), None
        read, write = os.pipe()
        try:
            env[ev.GLUONDIST_PROGRESS_FD] = str(write)
            with held:
                proc = subprocess.Popen(list(spec.argv), env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        start_new_session=True, pass_fds=(write,))
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        return proc, os.fdopen(read, "rb")

    def request_stack(self, proc: subprocess.Popen) -> None:
        kill_quietly(proc.pid, STACK_SIGNAL)

    def request_resize(self, proc: subprocess.Popen) -> None:
        kill_quietly(proc.pid, elastic.SIGNAL)

    def tree_cpu(self, child: "Child") -> Optional[float]:
        return session_cpu(child.proc.pid)


def local_gpus() -> int:
    """NVIDIA GPUs the driver lists (without importing MXNet or CUDA)."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


class Local(Backend):
    name = "local"

    def check_resources(self, options) -> None:
        if not options.gpus_per_worker:
            return
        need, have = options.gpus_per_worker * options.num_workers, local_gpus()
        if need > have:
            raise LaunchError(f"--gpus-per-worker {options.gpus_per_worker} for "
                              f"{options.num_workers} worker(s) needs {need} GPU(s); this "
                              f"machine has {have}; lower it or use hosts with GPUs")

    def transport(self, options, env: Mapping[str, str]) -> LocalTransport:
        return LocalTransport()


BACKEND = Local()
