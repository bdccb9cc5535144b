"""Small checks and messages that fit's parts share: counts, files a callback will write, the
line of an MXNet error that says what went wrong. Imports nothing of gluondist."""
from __future__ import annotations

import os

import numpy as np


def check_count(value, name: str, least: int) -> None:
    """Raise ValueError unless ``value`` is an integer (not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        kind = "positive" if least > 0 else "non-negative"
        raise ValueError(f"{name} must be a {kind} integer, not {value!r}")


def check_writable_file(path: str, owner: str) -> None:
    """Raise ValueError (before training) unless ``owner`` can write a file at ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(folder) or \
            not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{owner} cannot write {path}: give a file path in an existing, "
                         "writable directory")


def last_line(exc: BaseException) -> str:
    """The line of an exception's message that says what went wrong (MXNet's errors put a
    C++ stack trace first and the reason last)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else type(exc).__name__
    for prefix in ("mxnet.base.MXNetError: ", "MXNetError: "):
        text = text[len(prefix):] if text.startswith(prefix) else text
    return text
