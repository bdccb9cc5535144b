"""What the process group needs of a transport: the one interface that starts a spec on this
machine (local.LocalTransport), over ssh (ssh.SshTransport) or as a Slurm step
(slurm.SrunTransport). The monitor and the stall watch use nothing else."""
from __future__ import annotations

import subprocess
from typing import IO, Optional, Protocol, Tuple

# The annotations name plan.ProcessSpec and process.Child, not imported: process.py imports
# this module, and the layers test keeps imports acyclic.


class Transport(Protocol):
    error_records: bool  # a failing worker's error record reaches the launcher
    tree_cpu_known: bool  # tree_cpu() gives figures (else the stall watch has heartbeats only)
    silence: float  # seconds a host cut off from the launcher takes to end its processes (0: none)

    def spawn(self, spec: "ProcessSpec", progress: bool = False,
              error_file: Optional[str] = None) -> Tuple[subprocess.Popen, Optional[IO[bytes]]]:
        """Start ``spec``: its process (killing it ends the remote tree too) and its side
        channel (a binary stream of ``gluondist-...`` lines, or None). With ``progress`` a
        worker gets a progress channel; ``error_file`` is a local path where its bootstrap
        may record an exception (a transport that relays records otherwise may ignore it)."""

    def request_stack(self, proc: subprocess.Popen) -> None:
        """Ask the process for a dump of its Python stacks (on its output)."""

    def tree_cpu(self, child: "Child") -> Optional[float]:
        """CPU seconds of the child's process tree so far, or None where unknown."""

    def lost(self, child: "Child") -> bool:
        """Whether the exited ``child`` lost its connection rather than failing (call once its
        side channel has been read to the end)."""
