"""Run a plan's processes inside a Slurm allocation, one ``srun`` step each.

The steps inherit the launcher's environment through srun's ``--export=ALL`` (nothing on a
command line). Stopping a step's srun makes Slurm end its tasks; when the batch script (the
launcher) ends, Slurm ends every step of the job.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from typing import Mapping, Tuple

from ... import envvars as ev
from ..hosts import Host, parse_slurm_tasks
from ..errors import LaunchError
from ..child.proctree import STACK_SIGNAL
from ..plan import ProcessSpec
from . import Backend, Transport

SCONTROL_TIMEOUT = 30  # seconds for scontrol to answer: slurmctld may be busy, not gone


def allocation_hosts(env: Mapping[str, str]) -> Tuple[Host, ...]:
    """The allocation's nodes with their task counts (slots) and addresses; empty outside
    an allocation."""
    if not env.get(ev.SLURM_JOB_ID):
        return ()
    nodes = _scontrol(["show", "hostnames", env.get(ev.SLURM_JOB_NODELIST, "")]).split()
    tasks = env.get(ev.SLURM_TASKS_PER_NODE) or ",".join("1" for _ in nodes)
    addresses = []
    for node in nodes:
        m = re.search(r"\bNodeAddr=(\S+)", _scontrol(["show", "node", "-o", node]))
        addresses.append(m.group(1) if m else node)
    return parse_slurm_tasks(nodes, tasks, addresses)


def _scontrol(args) -> str:
    try:
        proc = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"scontrol {' '.join(args)} failed: {exc}") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise LaunchError(f"scontrol {' '.join(args)} failed: {why}")
    return proc.stdout


class SrunTransport(Transport):
    """No side channel (the steps run on other nodes): errors come from the log tail, and
    stall detection is refused for Slurm by the options (see transports.Transport). The
    defaults hold: no error records, no CPU figures, silence 0 (no keepalive of ours here:
    Slurm watches its own nodes), never lost() (srun's own failures come with its message in
    the log tail); a step is not asked to resize (a Slurm job is not elastic)."""

    def spawn(self, spec: ProcessSpec, progress: bool = False, error_file=None):
        argv = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={spec.host}", "--overlap",
                "--export=ALL", "--kill-on-bad-exit=1", "--quiet",
                f"--job-name=gluondist-{spec.label.replace(' ', '-')}", *spec.argv]
        return subprocess.Popen(argv, env={**os.environ, **spec.env}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True), None

    def request_stack(self, proc: subprocess.Popen) -> None:
        proc.send_signal(STACK_SIGNAL)  # srun forwards SIGUSR1 to its task


class Slurm(Backend):
    """Inside an allocation (sbatch, salloc): its nodes are the hosts, one srun step a process."""

    name = "slurm"
    multi_host = True
    progress = False  # the steps run on other nodes, with no side channel
    error_file_home = None
    elastic = False
    elastic_limit = "an allocation's nodes are fixed for its life; resize with a new sbatch"

    def discover(self, options, env: Mapping[str, str]):
        if options.hosts:
            raise LaunchError("--launcher slurm takes its hosts from the allocation; drop -H")
        return dataclasses.replace(options, hosts=allocation_hosts(env),
                                   hosts_source="the Slurm allocation")

    def check(self, options) -> None:
        if not options.hosts:
            raise LaunchError("--launcher slurm runs inside a Slurm allocation (sbatch or "
                              "salloc); none found (SLURM_JOB_ID is unset)")
        super().check(options)

    def transport(self, options, env: Mapping[str, str]) -> SrunTransport:
        return SrunTransport()


BACKEND = Slurm()
