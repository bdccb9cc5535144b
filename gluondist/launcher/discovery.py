"""``--host-discovery SCRIPT``: the hosts an elastic job may use, as an executable prints them
(one ``HOST[:SLOTS]`` a line, as horovodrun's ``--host-discovery-script``), read at the start
instead of -H and again every :data:`EVERY` seconds while the job runs."""
from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import Callable, Optional, Tuple

from .child.proctree import signal_tree
from .errors import LaunchError
from .hosts import Host, no_repeats, parse_inline

EVERY = 2.0  # seconds between runs of the script while the job runs
TIMEOUT = 10.0  # a run that takes longer counts as failed
RECOVERED = 60.0  # a failure is said again only after the script worked this long since


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
    """Runs the script every ``every`` seconds (:data:`EVERY` by default) on a thread of its
    own and hands every list it prints to ``changed`` (a grow that a failed run held back is
    asked at the next run that works, as is one noticed while no attempt ran). A run that
    fails leaves the hosts as they were and is said (through ``say``) once: again only after
    the script has worked for :data:`RECOVERED` seconds since, so a flaky inventory service
    is named once, not at every other run (issue 36, defect 10). ``run_now`` and
    ``refresh`` run it out of turn, under the same rule."""

    def __init__(self, script: str, hosts: Tuple[Host, ...],
                 changed: Callable[[Tuple[Host, ...]], None], say: Callable[[str], None],
                 every: Optional[float] = None):
        self.script, self.hosts, self.changed, self.say = script, hosts, changed, say
        self.every = EVERY if every is None else every  # read here: tests shorten EVERY
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()  # the watch's thread and the supervisor's both run it
        self._told = False  # a failure was said, and the script has not worked long since
        self._working_since: Optional[float] = None  # monotonic time of the first run that
        # worked after the last failure

    def __enter__(self) -> "Watcher":
        self._thread = threading.Thread(target=self._run, name="host discovery", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def run_now(self) -> Optional[Tuple[Host, ...]]:
        """The hosts the script prints now, or None when it fails; the watch's own list is
        left as it is."""
        try:
            hosts = discover(self.script)
        except LaunchError as exc:
            with self._lock:
                self._working_since, told, self._told = None, self._told, True
            if not told:
                self.say(f"{exc}; going on with the hosts it printed before")
            return None
        with self._lock:
            now = time.monotonic()
            if self._working_since is None:
                self._working_since = now
            if now - self._working_since >= RECOVERED:
                self._told = False
        return hosts

    def refresh(self) -> Tuple[Host, ...]:
        """The hosts the script prints now, kept as the watch's list; those it printed before
        when it fails."""
        hosts = self.run_now()
        with self._lock:
            if hosts is not None:
                self.hosts = hosts
            return self.hosts

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            hosts = self.run_now()
            if hosts is not None:
                with self._lock:
                    self.hosts = hosts
                try:
                    self.changed(hosts)
                except Exception as exc:  # noqa: BLE001 (the job goes on; say it once)
                    self.say(f"acting on --host-discovery's new hosts failed: {exc!r}")
