"""A raw TCP probe between two workers of a bench job: the link's rate without ps-lite, the
bound the kvstore's figures are compared with.

Worker 0 listens on its own address; the first worker on another host (by the address ps-lite
binds, ``DMLC_NODE_HOST``) connects and sends ``nbytes``; worker 0 times them from the first
byte to the last. The addresses travel through the job's kvstore (``allgather``), so nothing
but the two workers and the job's own hosts is involved. Every worker calls :func:`probe`
together; it returns the rate in bytes/s, or None when every worker is on one host (loopback
is no link) or an address is not IPv4.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import time
from typing import Optional

from .. import envvars as ev
from .. import kvstore

BLOCK = 1 << 16
TIMEOUT = 60.0  # seconds for the connection and the transfer: a probe never hangs a bench


def _my_address() -> Optional[str]:
    host = os.environ.get(ev.DMLC_NODE_HOST)
    try:
        return str(ipaddress.IPv4Address(socket.gethostbyname(host))) if host else None
    except (OSError, ValueError):
        return None


def probe(nbytes: int) -> Optional[float]:
    me = kvstore.rank()
    listener = None
    port = 0
    address = _my_address()
    if me == 0 and address is not None:
        listener = socket.create_server((address, 0))
        listener.settimeout(TIMEOUT)
        port = listener.getsockname()[1]
    # octets, not one 32-bit number: the kvstore may sum in float32, exact only below 2**24
    octets = [-1] * 4 if address is None else [int(o) for o in address.split(".")]
    table = kvstore.allgather([*octets, port]).astype(int)
    addresses = [None if row[0] < 0 else ".".join(map(str, row[:4])) for row in table]
    peers = [r for r, a in enumerate(addresses) if a is not None and a != addresses[0]]
    rate = 0.0
    try:
        if addresses[0] is not None and peers:
            if me == 0:
                rate = _receive(listener, nbytes)
            elif me == peers[0]:
                _send(addresses[0], int(table[0, 4]), nbytes)
    finally:
        if listener is not None:
            listener.close()
    found = kvstore.allgather([rate])[0, 0]
    return float(found) if found > 0 else None


def _send(host: str, port: int, nbytes: int) -> None:
    block = b"\0" * BLOCK
    with socket.create_connection((host, port), timeout=TIMEOUT) as conn:
        sent = 0
        while sent < nbytes:
            conn.sendall(block[:min(BLOCK, nbytes - sent)])
            sent += min(BLOCK, nbytes - sent)


def _receive(listener: socket.socket, nbytes: int) -> float:
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(TIMEOUT)
        got = len(conn.recv(BLOCK))
        start = time.perf_counter()
        while got < nbytes:
            chunk = conn.recv(BLOCK)
            if not chunk:
                break
            got += len(chunk)
        elapsed = time.perf_counter() - start
    return got / elapsed if elapsed > 0 else 0.0
