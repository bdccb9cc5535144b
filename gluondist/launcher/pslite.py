"""What the launcher reads in ps-lite's own messages (PS_VERBOSE=1): when a node started its
kvstore and when the scheduler has everyone; and in dmlc's (the logging of ps-lite and MXNet),
why a process ended. The one place their wording is known."""
from __future__ import annotations

import re
from typing import Sequence

PSLITE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S*ps-lite/\S+: ")
BOUND = "Bind to role="
FORMED = "the scheduler is connected to"


def _is_error(line: str) -> bool:
    low = line.lower()
    return "failed" in low or "error" in low or "fatal" in low


def is_pslite_chatter(line: str) -> bool:
    """ps-lite's routine messages, which the console hides (the log files keep them)."""
    return bool(PSLITE.match(line)) and not _is_error(line)


# dmlc's log lines, "[hh:mm:ss] file:line: message"; an uncaught dmlc::Error (a failed CHECK,
# a LOG(FATAL)) ends the process with SIGABRT after "terminate called after throwing ..." and
# "  what():  [hh:mm:ss] file:line: Check failed: ...", as a server of a job whose workers
# pushed one key with two shapes does
STAMPED = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: ")
WHAT = "what():"
CHECK = "Check failed:"
REASON_CHARS = 200  # a reason longer than this is cut, the log keeps it whole


def dmlc_reason(lines: Sequence[str]) -> str:
    """The one-line reason dmlc gave for ending a process, from its last output ``lines``:
    the last uncaught exception's ``what()``, else the last failed check, else the last
    logged error, trimmed to its message ("Check failed: lshape == rshape: operands shape
    mismatch"); "" when they hold none."""
    tests = (lambda line: WHAT in line, lambda line: CHECK in line,
             lambda line: bool(STAMPED.match(line.strip())) and _is_error(line))
    for test in tests:
        for line in reversed(lines):
            text = _trimmed(line.split(WHAT, 1)[-1]) if test(line) else ""
            if text:
                return text
    return ""


def _trimmed(text: str) -> str:
    text = STAMPED.sub("", text.strip())
    at = text.find(CHECK)
    text = text[at:] if at >= 0 else text
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."
