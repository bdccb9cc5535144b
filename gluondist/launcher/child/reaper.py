"""The launcher's reaper, ``python -m gluondist.launcher.child.reaper``, started in a session of its
own. It reads ``+ PGID`` and ``- PGID`` lines (a child started or reaped) and ``done`` on
stdin. Should stdin end without ``done``, the launcher died, even by SIGKILL: every group it
was told about gets SIGKILL, with every process of its session (see proctree.signal_tree).
Standard library and proctree.py only."""
import signal
import sys

from .proctree import signal_tree


def main(lines) -> int:
    groups = set()
    for line in lines:
        op, _, pgid = line.strip().partition(" ")
        if op == "done":
            return 0
        (groups.add if op == "+" else groups.discard)(int(pgid))
    for pgid in groups:
        signal_tree(pgid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.stdin))
