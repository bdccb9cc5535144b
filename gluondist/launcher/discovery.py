"""``--host-discovery SCRIPT``: the hosts an elastic job may use, as an executable prints them
(one ``HOST[:SLOTS]`` a line, as horovodrun's ``--host-discovery-script``), read at the start
instead of -H and again every :data:`EVERY` seconds while the job runs."""
from __future__ import annotations

import signal
import subprocess
import threading
from typing import Callable, Optional, Tuple

from .child.proctree import signal_tree
from .errors import LaunchError
from .hosts import Host, no_repeats, parse_inline

EVERY = 2.0  # seconds between runs of the script while the job runs
TIMEOUT = 10.0  # a run that takes longer counts as failed


def stop_session(pid: int) -> None:
    """SIGKILL whatever of the script's session is left (a child it left behind, or all of it
    after a timeout)."""
    signal_tree(pid, signal.SIGKILL)


def discover(script: str, timeout: float = TIMEOUT) -> Tuple[Host, ...]:
    """The hosts ``script`` prints now; LaunchError naming the script and what was wrong."""
    name = f"--host-discovery {script}"
    try:  # in a session of its own: a script that hangs is ended with whatever it started
        proc = subprocess.Popen([script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        raise LaunchError(f"{name} cannot run: {exc.strerror}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{name} did not finish within {timeout:g}s; it must print its "
                          "HOST[:SLOTS] lines and exit within that") from None
    finally:
        stop_session(proc.pid)
        proc.wait()
    if proc.returncode != 0:
        last = (err.strip().splitlines() or [""])[-1]
        raise LaunchError(f"{name} failed with exit code {proc.returncode}"
                          + (f": {last}" if last else ""))
    lines = [l.split("#", 1)[0].strip() for l in out.splitlines()]
    lines = [l for l in lines if l]
    if not lines:
        raise LaunchError(f"{name} printed no hosts; it should print HOST[:SLOTS] lines")
    hosts = []
    for line in lines:
        if " " in line or "," in line:
            raise LaunchError(f"{name} printed {line!r}: one HOST[:SLOTS] a line")
        try:
            hosts += parse_inline(line, name)
        except LaunchError:
            raise LaunchError(f"{name} printed {line!r}: one HOST[:SLOTS] a line, SLOTS >= 1") \
                from None
    return no_repeats(hosts, name, "printed", "print")


class Watcher:
    """Runs the script every ``every`` seconds on a thread of its own and hands each new list
    of hosts to ``changed``; a run that fails is said once (through ``say``) until the script
    works again, and the hosts stay as they were."""

    def __init__(self, script: str, hosts: Tuple[Host, ...],
                 changed: Callable[[Tuple[Host, ...]], None], say: Callable[[str], None],
                 every: float = EVERY):
        self.script, self.hosts, self.changed, self.say, self.every = \
            script, hosts, changed, say, every
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._told: Optional[str] = None

    def __enter__(self) -> "Watcher":
        self._thread = threading.Thread(target=self._run, name="host discovery", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def latest(self) -> Tuple[Host, ...]:
        return self.hosts

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                hosts = discover(self.script)
            except LaunchError as exc:
                if str(exc) != self._told:
                    self.say(f"{exc}; going on with the hosts it printed before")
                    self._told = str(exc)
                continue
            self._told = None
            if hosts != self.hosts:
                self.hosts = hosts
                try:
                    self.changed(hosts)
                except Exception as exc:  # noqa: BLE001 (the job goes on; say it once)
                    self.say(f"acting on --host-discovery's new hosts failed: {exc!r}")
