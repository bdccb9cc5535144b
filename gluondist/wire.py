"""The one definition of what a launched process tells the launcher besides its output: lines
``gluondist-KIND VALUE`` on a side channel (a worker's progress pipe, or an ssh session's
stderr), written with :func:`encode` and read back with :func:`decode`.

Writers: gluondist.heartbeat (progress), the ssh remote side (cpu, error, exit) and the bench's
workers (bench, on their output). The reader is the launcher's process group (and the bench).
Standard library only: a worker imports it before anything else.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Union

PREFIX = "gluondist-"
# The scheduler's exit code when the port the launcher gave it was taken before it could bind
# it (the launcher then retries on another port): EADDRINUSE's number on Linux.
PORT_TAKEN = 98
# A scheduler's or server's exit code when it refused a command from the network (an optimizer
# that is not MXNet's, say: see launcher/child/server.py): sysexits' EX_NOPERM.
REFUSED = 77
# A worker's exit code after it stopped at a checkpoint because the launcher asked the job to
# grow (gluondist.elastic); the launcher reads it as such only when it asked.
RESIZED = 79
# The ssh remote side's exit code when it ended its process tree because the launcher had been
# silent for longer than ssh takes to give up (its link is cut; ssh.Link.silence): the launcher
# reports that host as lost.
SILENCED = 76


@dataclass(frozen=True)
class Progress:
    batches: int  # training batches this worker finished so far (gluondist.heartbeat)


@dataclass(frozen=True)
class Cpu:
    seconds: float  # CPU time of the process's whole tree so far (the ssh remote side)


@dataclass(frozen=True)
class Error:
    record: dict  # a worker's error record (launcher/child/errorfile.py), relayed over ssh


@dataclass(frozen=True)
class Exit:
    status: int  # the process's exit status as its host saw it: the ssh session's last line


@dataclass(frozen=True)
class Bench:
    figures: dict  # a bench worker's measurements (gluondist bench kvstore)


Message = Union[Progress, Cpu, Error, Exit, Bench]
_KINDS = {"progress": (Progress, int), "cpu": (Cpu, float), "error": (Error, json.loads),
          "exit": (Exit, int), "bench": (Bench, json.loads)}
_NAMES = {cls: name for name, (cls, _) in _KINDS.items()}


def encode(message: Message) -> str:
    """The line (without its newline) that carries ``message``."""
    value = next(iter(vars(message).values()))
    text = json.dumps(value) if isinstance(value, dict) else \
        f"{value:.2f}" if isinstance(value, float) else str(value)
    return f"{PREFIX}{_NAMES[type(message)]} {text}"


def decode(line: str) -> Optional[Message]:
    """The message ``line`` carries, or None when it carries none (anything else on the
    channel, such as ssh's own messages, is output)."""
    if not line.startswith(PREFIX):
        return None
    kind, _, text = line[len(PREFIX):].partition(" ")
    if kind not in _KINDS:
        return None
    cls, parse = _KINDS[kind]
    try:
        value = parse(text)
    except ValueError:
        return None
    if cls in (Error, Bench) and not isinstance(value, dict):
        return None
    return cls(value)
