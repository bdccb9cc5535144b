"""What each role of a job runs and the environment it gets: the one builder, used by the
local, ssh and Slurm plans (plan.py) and by the Kubernetes manifests (and their pod entry).

Standard library only: the Kubernetes pod entry imports it before anything else.
"""
from __future__ import annotations

import os
import re
import shutil
from typing import Dict, Mapping, Optional, Sequence, Tuple

from .. import envvars as ev
from . import child

ROLES = ("scheduler", "server", "worker")
# Scheduler and servers run MXNet's server loop behind gluondist's controller, which loads
# no pickle but an MXNet optimizer's (server.py); they never run the user's script.
SERVER_ARGV = ("-m", child.SERVER)
BOOTSTRAP = ("-m", child.BOOTSTRAP)


def job_env(root_uri: str, port: int, num_workers: int, num_servers: int,
            interface: Optional[str] = None) -> Dict[str, str]:
    """What every process of a job shares: where the scheduler is and how many nodes join."""
    env = {ev.DMLC_PS_ROOT_URI: root_uri, ev.DMLC_PS_ROOT_PORT: str(port),
           ev.DMLC_NUM_WORKER: str(num_workers), ev.DMLC_NUM_SERVER: str(num_servers)}
    if interface:
        env[ev.DMLC_INTERFACE] = interface
    return env


def pslite_verbose(user: Optional[str]) -> Tuple[str, bool]:
    """``PS_VERBOSE`` for every process of a launched job, and whether ps-lite's routine
    messages reach the console, given the user's own value (from the environment or ``--env``;
    None if unset). The monitor learns that nodes joined from ps-lite's level-1 messages, so
    every process runs at level 1 at least (2, every message, if asked); the user's value
    decides only what the console shows: chatter only when they asked for it (1 or more)."""
    try:
        level = int(user) if user is not None else 0
    except ValueError:
        level = 0  # ps-lite's own reading of a non-number (dmlc::GetEnv's stream) is 0 too
    return str(max(level, 1)), level >= 1


def role_env(role: str, rank: int, kvstore: str, attempt: int = 0) -> Dict[str, str]:
    """The variables that make a process this role (and, for a worker, this rank, with the
    ``attempt``'s index as GLUONDIST_RESTART_COUNT: restarts, grows and port retries alike,
    since it names each attempt's logs; torchrun's TORCHELASTIC_RESTART_COUNT leaves a
    scaling event's count as it was)."""
    env = {ev.DMLC_ROLE: role}
    if role == "worker":
        env.update({ev.GLUONDIST_RANK: str(rank), ev.GLUONDIST_KVSTORE: kvstore,
                    ev.GLUONDIST_RESTART_COUNT: str(attempt), ev.PYTHONUNBUFFERED: "1"})
    return env


def worker_defaults(user_env: Mapping[str, str], gpus: int = 0) -> Dict[str, str]:
    """What every launcher sets for workers unless the user set it (``user_env``): backward's
    operations run one by one, so each gradient is ready, and pushed, as soon as backward makes
    it (docs/servers.md, "Overlap with backward"). Not where the user set either of MXNet's
    variables for it (the backward one falls back to the general one), nor with ``gpus`` per
    worker, where bulking saves kernel launches and this was not measured."""
    if gpus or ev.MXNET_BULK_BACKWARD in user_env or ev.MXNET_BULK in user_env:
        return {}
    return {ev.MXNET_BULK_BACKWARD: "0"}


def server_argv(python: str) -> Tuple[str, ...]:
    return (python, *SERVER_ARGV)


def worker_argv(command: Sequence[str], python: str) -> Tuple[str, ...]:
    """The worker command. A ``.py`` script, ``<python> SCRIPT.py`` or ``<python> -m module``
    (with ``python`` itself) runs under the bootstrap, which ends the process at once on
    failure instead of letting MXNet's exit barrier wait for workers that will never come,
    records the error for the launcher, and dumps its stacks on request. Other commands run
    as they are."""
    cmd = tuple(command)
    if cmd and cmd[0].endswith(".py"):
        return (python, *BOOTSTRAP, *cmd)
    if len(cmd) >= 2 and (cmd[1] == "-m" or cmd[1].endswith(".py")) \
            and is_python(cmd[0]) and _same_file(cmd[0], python):
        return (python, *BOOTSTRAP, *cmd[1:])
    return cmd


def runs_bootstrap(argv: Sequence[str]) -> bool:
    return len(argv) >= 3 and tuple(argv[1:3]) == BOOTSTRAP


def is_python(name: str) -> bool:
    """Whether a command's name is a Python interpreter's (python, python3, python3.11)."""
    return re.fullmatch(r"python[0-9.]*", os.path.basename(name)) is not None


def _same_file(a: str, b: str) -> bool:
    """The same interpreter in the same environment: a virtualenv's ``python`` is a link to
    its base interpreter, so another venv's resolves to the same file, with other packages."""
    found, other = shutil.which(a), shutil.which(b) or b
    return found is not None and os.path.realpath(found) == os.path.realpath(other) and \
        os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(other))


def role_of_index(index: int, num_servers: int) -> Tuple[str, int]:
    """A single Indexed Job's completion index as (role, rank): 0 is the scheduler, the next
    ``num_servers`` the servers, the rest the workers."""
    if index == 0:
        return "scheduler", 0
    if index <= num_servers:
        return "server", index - 1
    return "worker", index - 1 - num_servers
