"""What the launcher reads in ps-lite's own messages (PS_VERBOSE=1): when a node started its
kvstore and when the scheduler has everyone. The one place their wording is known."""
from __future__ import annotations

import re

PSLITE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S*ps-lite/\S+: ")
BOUND = "Bind to role="
FORMED = "the scheduler is connected to"


def _is_error(line: str) -> bool:
    low = line.lower()
    return "failed" in low or "error" in low or "fatal" in low


def is_pslite_chatter(line: str) -> bool:
    """ps-lite's routine messages, which the console hides (the log files keep them)."""
    return bool(PSLITE.match(line)) and not _is_error(line)
