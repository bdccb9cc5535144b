"""The lines fit shows a person (an epoch's figures, a resume, nothing to train): logged at INFO
on the ``gluondist`` logger, and written to stderr as well when logging would not show them.

Logging shows nothing at INFO until a program configures it, so a script run without a
terminal showed no sign of training (Keras prints a line per epoch there). A program that
configured logging (``logging.basicConfig(level=INFO)``, or the worker bootstrap of
``gluondist launch``) gets each line once, through its handlers; any other gets it on stderr,
where the progress bar and logging's own handlers write too, so that stdout keeps the
program's results."""
from __future__ import annotations

import logging
import sys


def say(logger: logging.Logger, message: str) -> None:
    """``message`` at INFO on ``logger``, and on stderr unless a handler shows it."""
    logger.info("%s", message)
    if not shown(logger, logging.INFO):
        print(message, file=sys.stderr, flush=True)


def shown(logger: logging.Logger, level: int) -> bool:
    """Whether a record of ``level`` on ``logger`` reaches a handler that takes it (logging's
    last-resort handler, which takes warnings only, does not count)."""
    if not logger.isEnabledFor(level):
        return False
    node = logger
    while node is not None:
        if any(level >= handler.level for handler in node.handlers):
            return True
        if not node.propagate:
            return False
        node = node.parent
    return False
