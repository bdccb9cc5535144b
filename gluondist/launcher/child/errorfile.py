"""A worker's uncaught exception as a small JSON file: written by the worker bootstrap, read by
the launcher (torchrun's ``@record`` error file, without a decorator to add).

Fields: ``type``, ``message``, ``traceback`` (list of lines, as Python prints them), ``time``
(seconds since the epoch, when it was raised), ``rank``, ``host``, ``pid``. Standard library
only.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import List, Optional

from ... import envvars as ev


def write(path: str, exc: BaseException, traceback_lines: List[str],
          when: Optional[float] = None) -> None:
    """Record ``exc`` (raised at ``when``, default now) at ``path``, atomically."""
    lines = [l for chunk in traceback_lines for l in chunk.rstrip("\n").split("\n")]
    record = {"type": type(exc).__name__, "message": _message(exc), "traceback": lines,
              "time": time.time() if when is None else when,
              "rank": os.environ.get(ev.GLUONDIST_RANK),
              "host": socket.gethostname(), "pid": os.getpid()}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)  # the launcher never reads half a file


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ fails still gets recorded
        return f"<{type(exc).__name__}: unprintable>"


def read(path: str) -> Optional[dict]:
    """The record, or None when there is none (or it cannot be read)."""
    try:
        with open(path) as f:
            return valid(json.load(f))
    except (OSError, ValueError):
        return None


def valid(record) -> Optional[dict]:
    """``record`` when it is a record the launcher can report (whoever wrote it: the file is
    the worker's to write, and over ssh it arrives on the side channel), else None."""
    if not isinstance(record, dict):
        return None
    when, lines = record.get("time"), record.get("traceback", [])
    if not isinstance(when, (int, float)) or isinstance(when, bool) or when != when:
        return None
    if not isinstance(lines, list) or not all(isinstance(l, str) for l in lines):
        return None
    return record
