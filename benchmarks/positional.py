"""The command lines of the worker scripts that other benchmarks start (big_layer.py,
dist_worker.py, peer_train.py, tcp_pair.py): their docstring on ``--help``, one line on a wrong
count of arguments."""
import os
import sys
from typing import List


def positional(doc: str, least: int, most: int) -> List[str]:
    """``sys.argv[1:]``, once it holds ``least`` to ``most`` arguments; ``-h``/``--help`` prints
    ``doc`` and exits 0, any other count exits 2 with one line."""
    args, name = sys.argv[1:], os.path.basename(sys.argv[0])
    if args[:1] in (["-h"], ["--help"]):
        print(doc.strip())
        sys.exit(0)
    if not least <= len(args) <= most:
        print(f"{name}: {len(args)} arguments given, {least} to {most} wanted; see "
              f"{name} --help (other benchmarks start this script)", file=sys.stderr)
        sys.exit(2)
    return args
