"""Ports for a job's scheduler and nodes, asked of the OS right before each attempt: never a
fixed one (two jobs on one machine, or a test run in parallel, would collide)."""
from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from typing import List

# Ports are drawn from here up to the OS's ephemeral range. A port in that range, once
# released, can become the source port of any process's next outgoing connection before
# ps-lite binds it; a node that then re-picks its port changes ps-lite's rank order (seen in
# CI, with tests launching jobs in parallel). Below it, only a process that binds the same
# port by number can take it.
FLOOR = 16384
TRIES = 64


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the OS hands out for outgoing connections (Linux's default 32768)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, host: str = "127.0.0.1", rng: random.Random = None) -> List[int]:
    """``count`` distinct ports free right now, below the ephemeral range where it leaves room
    (else the OS's choice). They are released before use, so one may still be taken
    meanwhile: the scheduler's case is retried, a node's ps-lite re-picks."""
    rng = rng or random.SystemRandom()
    low = ephemeral_low()
    ports: List[int] = []
    with ExitStack() as stack:
        while len(ports) < count:
            sock = stack.enter_context(socket.socket())
            for _ in range(TRIES if low - FLOOR >= 1024 else 0):
                port = rng.randrange(FLOOR, low)
                if _binds(sock, host, port):
                    break
            else:
                sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def _binds(sock: socket.socket, host: str, port: int) -> bool:
    try:
        sock.bind((host, port))
    except OSError:
        return False
    return True
