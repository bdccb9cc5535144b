"""Ports for a job's scheduler and nodes, asked of the OS right before each attempt: never a
fixed one (two jobs on one machine, or a test run in parallel, would collide)."""
from __future__ import annotations

import socket
from contextlib import ExitStack
from typing import List


def free_ports(count: int, host: str = "127.0.0.1") -> List[int]:
    """``count`` distinct ports the OS reports free right now. They are released before use, so
    one may be taken meanwhile: the scheduler's case is retried, a node's ps-lite re-picks."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
