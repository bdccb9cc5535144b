"""Per-epoch checkpoints that a crash cannot corrupt.

One file per epoch, ``epoch-0003.ckpt``, written to a temporary name, flushed to disk, then
renamed over: a process killed mid-write leaves only a stray ``.tmp`` file (removed by the next
save) and every earlier checkpoint intact. The two newest are kept. Only one process (worker 0)
writes to a directory.
"""
from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Optional

FORMAT = 1
KEEP = 2
_NAME = re.compile(r"^epoch-(\d{4,})\.ckpt$")


def save(directory, epoch: int, state: dict) -> Path:
    """Write ``state`` (picklable) as the checkpoint of ``epoch``; returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"epoch-{epoch:04d}.ckpt"
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump({"format": FORMAT, "epoch": epoch, **state}, f, protocol=4)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)
    for stray in directory.glob(".epoch-*.tmp"):  # left by a writer killed mid-write
        stray.unlink(missing_ok=True)
    for old in _epochs(directory)[:-KEEP]:
        (directory / f"epoch-{old:04d}.ckpt").unlink(missing_ok=True)
    return path


def load_latest(directory) -> Optional[dict]:
    """The newest complete checkpoint in ``directory``, or None when there is none."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    for epoch in reversed(_epochs(directory)):
        try:
            with open(directory / f"epoch-{epoch:04d}.ckpt", "rb") as f:
                state = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            continue  # unreadable (e.g. a copy cut short outside our rename): try the previous
        if isinstance(state, dict) and state.get("format") == FORMAT:
            return state
    return None


def _epochs(directory: Path):
    return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(directory)) if m)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
