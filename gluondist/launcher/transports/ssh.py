"""Start a plan's processes on other hosts over ssh.

ssh runs non-interactively (BatchMode: no password prompt can hang the job). The remote side is
the module gluondist.launcher.child.remote (see its docstring for the protocol): it reads the
process's argv, environment and working directory as one JSON line from stdin, so none of it
is quoted into a shell or shown by `ps`, runs the command in its own session, and ends the
command's whole tree when stdin ends (the launcher stopped or died) or when the launcher's
keepalive lines stop coming (the link is cut: nothing could close stdin).

The session's stderr is a side channel (see process.py): a worker's heartbeat, its tree's CPU
time, its error record and, for every process, the remote side's exit report. A session that
ends with ssh's own 255 (its keepalive gave up, the connection broke) without that report lost
its connection: the monitor reports `lost the connection to host H`, not a process's exit.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ... import __version__
from ... import envvars as ev, wire
from ..errors import LaunchError
from ..plan import ProcessSpec
from .. import child
from ..child.remote import PROTOCOL, STOP_WAIT
from . import Backend, Show, Transport

# Names never forwarded: they describe the launcher's own host or session, or are set per
# process by the plan or the transport (DMLC_*, GLUONDIST_RANK, GLUONDIST_ERROR_FILE, ...), or
# are the launcher's own options (GLUONDIST_NUM_WORKERS, ...). The job's settings
# (envvars.is_job_setting) always go.
DENY = {"HOME", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME", "HOSTNAME", "TERM", "DISPLAY",
        "SHLVL", "_", "MAIL", "TMPDIR", "LS_COLORS", "PS1", "KRB5CCNAME", "XAUTHORITY",
        ev.CUDA_VISIBLE_DEVICES}
DENY_PREFIXES = ("SSH_", "XDG_", "DMLC_", "GLUONDIST_", "BASH_FUNC_")

REMOTE = child.REMOTE
# --link-timeout's default: how long a host may be unreachable before it counts as lost. Long
# enough for TCP to retransmit across a blip of several seconds, short enough that a cut-off
# host is cleared well within a minute (see docs/multi-host.md).
LINK_TIMEOUT = 18.0
ALIVE_COUNT = 3  # ssh keepalives a session may miss before ssh ends it


@dataclass(frozen=True)
class Link:
    """The timeouts of the ssh sessions, all from --link-timeout T. ssh gives up on a server
    that misses ALIVE_COUNT keepalives ``alive`` s apart (after 0.83 T to 1.1 T without an
    answer), or does not accept a connection within ``connect`` s (T / 3): the host is lost.
    The remote side ends its tree after ``silence`` s without the launcher's keepalive line
    (sent every ``keepalive`` s) and reports that as a lost link (wire.SILENCED). ``silence``
    is longer than ssh can take to give up, counted from the last keepalive that got through,
    so the launcher always decides a loss first: a link back after that finds the far side
    still running, and the launcher stops it over a new session (SshTransport.stop_left)."""

    timeout: float = LINK_TIMEOUT

    @property
    def silence(self) -> float:
        # ssh gives up within ALIVE_COUNT + 1 intervals of the cut; the last line that got
        # through may be a keepalive older than the cut; 2 s for the launcher's teardown
        return self.alive * (ALIVE_COUNT + 1) + self.keepalive + 2.0  # 25 s at the default

    @property
    def keepalive(self) -> float:
        return min(3.0, self.timeout / 4)

    @property
    def alive(self) -> int:
        return max(1, round(self.timeout * 5 / 18))  # 5 s at the default 18

    @property
    def connect(self) -> int:
        return max(1, round(self.timeout / 3))  # 6 s at the default
PREFLIGHT_TIMEOUT = 30.0  # for a host's preflight: ssh's connect plus importing gluondist there
PREFLIGHT_THREADS = 16  # hosts preflighted at once: a big hostfile in a few rounds of 30 s


def forwarded_env(base_env: Mapping[str, str]) -> Dict[str, str]:
    """The launcher's environment minus what describes its own host or session and what the
    launcher sets itself (``DENY``), its job's settings kept: what a local job's processes
    would take from it (the plan's own values then go over these)."""
    return {k: v for k, v in base_env.items() if ev.is_job_setting(k)
            or (k not in DENY and not k.startswith(DENY_PREFIXES))}


def ssh_argv(host: str, remote: Sequence[str], ssh_config: Optional[str] = None,
             link: Link = Link()) -> List[str]:
    """The ssh command running ``remote`` on ``host``. The one place a command is quoted into a
    string, because ssh hands the remote shell a single string."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={link.connect}",
            "-o", f"ServerAliveInterval={link.alive}",
            "-o", f"ServerAliveCountMax={ALIVE_COUNT}"]
    if ssh_config:
        argv += ["-F", ssh_config]
    return argv + [host, shlex.join(remote)]


class SshTransport(Transport):
    """Starts each spec on its host through ssh; the process group treats it like a local one
    (killing the local ssh ends the remote tree through the remote side). The remote side
    relays error records and CPU time on the side channel (see transports.Transport)."""

    error_records = tree_cpu_known = True

    def __init__(self, python: str, base_env: Mapping[str, str], cwd: str,
                 ssh_config: Optional[str] = None, link: Link = Link()):
        self.python, self.cwd, self.ssh_config, self.link = python, cwd, ssh_config, link
        self.env = forwarded_env(base_env)
        self.silence, self.keepalive = link.silence, link.keepalive
        self._lock = threading.Lock()  # one writer at a time on each session's stdin
        self._live: List[subprocess.Popen] = []
        self._pinger: Optional[threading.Thread] = None
        self.tag = uuid.uuid4().hex  # names this launcher's remote sides (remote.py --stop)

    def spawn(self, spec: ProcessSpec, progress: bool = False, error_file=None):
        """``error_file`` is the launcher's local path, unused: the remote side picks its own
        and relays its record on the side channel."""
        remote = [self.python, "-m", REMOTE, "--tag", self.tag]
        proc = subprocess.Popen(ssh_argv(spec.host, remote, self.ssh_config, self.link),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        # the job's line, and stdin kept open: its end means "stop"
        self._send(proc, json.dumps(self.job(spec, progress)))
        with self._lock:
            self._live.append(proc)
            if self._pinger is None:
                self._pinger = threading.Thread(target=self._ping, name="ssh keepalive",
                                                daemon=True)
                self._pinger.start()
        return proc, proc.stderr

    def job(self, spec: ProcessSpec, progress: bool = False) -> dict:
        """The line the remote side reads first (child/remote.py): what to run, with the
        forwarded environment under the plan's own values."""
        return {"protocol": PROTOCOL, "argv": list(spec.argv), "env": {**self.env, **spec.env},
                "cwd": self.cwd, "worker": spec.role == "worker", "progress": progress,
                "silence": self.silence}

    def _send(self, proc: subprocess.Popen, line: str) -> None:
        with self._lock:
            try:
                proc.stdin.write((line + "\n").encode())
                proc.stdin.flush()
            except (OSError, ValueError):  # the session ended, or its stdin was closed
                pass

    def _ping(self) -> None:
        """Every ``keepalive`` seconds a line to each live session; ends when none is left."""
        while True:
            time.sleep(self.keepalive)
            with self._lock:
                self._live = [p for p in self._live if p.poll() is None]
                live = list(self._live)
                if not live:
                    self._pinger = None
                    return
            for proc in live:
                self._send(proc, "ping")

    # the remote side's own SIGKILL comes STOP_GRACE after its SIGTERM: wait a little longer
    stop_slack = 2.0

    def stop(self, proc: subprocess.Popen) -> None:
        """Close the session's stdin: the remote side stops its tree (SIGTERM, SIGKILL
        STOP_GRACE later), reports and exits, which ends ssh. So the session ends once the
        remote processes are gone, not before (a SIGTERM to ssh would drop the connection at
        once and leave the remote teardown running after the launcher exits). A session that
        cannot hear it (a cut link) is killed at the group's deadline."""
        with self._lock:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def request_stack(self, proc: subprocess.Popen) -> None:
        self._send(proc, "dump")

    def request_resize(self, proc: subprocess.Popen) -> None:
        self._send(proc, "resize")

    def tree_cpu(self, child):
        return child.cpu

    def stop_left(self, hosts) -> Dict[str, str]:
        """A lost host's remote sides end their trees ``silence`` s after the launcher's last
        line reached them; a link back before that would leave them running past the
        launcher's exit. So each lost host is asked once more, over a new session, to stop what
        this launcher's tag still runs there (remote.py --stop), and waited for."""
        wait = self.link.connect + STOP_WAIT + PREFLIGHT_TIMEOUT / 3  # + starting Python there
        with ThreadPoolExecutor(max_workers=min(PREFLIGHT_THREADS, len(hosts)) or 1) as pool:
            return dict(zip(hosts, pool.map(lambda h: self._stop_on(h, wait), hosts)))

    def _stop_on(self, host: str, wait: float) -> str:
        argv = ssh_argv(host, [self.python, "-m", REMOTE, "--stop", self.tag], self.ssh_config,
                        self.link)
        alone = (f"what the job ran there ends by itself {self.silence:g}s after the "
                 "launcher's last word reached it (--link-timeout)")
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=wait)
            said = json.loads(proc.stdout.strip().splitlines()[-1])
            stopped, left = int(said["stopped"]), int(said["left"])
        except subprocess.TimeoutExpired:
            return f"does not answer within {wait:g}s: {alone}"
        except (ValueError, IndexError, KeyError, TypeError):
            last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            return f"does not answer ({last}): {alone}"
        if not stopped:
            return "answered again: nothing of the job was left there"
        if left:
            return (f"answered again: stopped {stopped - left} of the job's {stopped} "
                    f"process(es) left there; {left} would not end")
        return f"answered again: stopped the job's {stopped} process(es) left there"

    def lost(self, child) -> bool:
        """ssh ended with its own code, 255, and without the remote side's exit report, or
        the remote side reports that it stopped the process because the launcher went silent
        (--link-timeout): the connection was lost (call once the side channel has been read to
        its end). Any other code without a report came from the remote shell (a python that
        would not start)."""
        if child.exit_report == wire.SILENCED:
            return True
        return child.exit_report is None and child.proc.returncode == 255


@dataclass(frozen=True)
class HostProblem:
    """Why a host cannot take a job, in one line."""

    unreachable: bool  # ssh did not get in (no answer, refused, no login); else it fails a check
    detail: str

    def __str__(self) -> str:
        return self.detail


def check_host(host: str, python: str, ssh_config: Optional[str] = None,
               timeout: float = PREFLIGHT_TIMEOUT, link: Link = Link()) -> Optional[HostProblem]:
    """What is wrong with ``host`` for a job, or None: reachable, login works, ``python``
    imports MXNet and the launcher's own gluondist version (the protocol's)."""
    try:
        proc = subprocess.run(ssh_argv(host, [python, "-m", REMOTE, "--preflight"], ssh_config,
                                       link),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return HostProblem(True, f"no answer over ssh within {timeout:g}s")
    last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    if proc.returncode == 255:
        return HostProblem(True, f"ssh failed: {last}")
    detail = _check_report(proc, python, last)
    return HostProblem(False, detail) if detail else None


def _check_report(proc: subprocess.CompletedProcess, python: str, last: str) -> Optional[str]:
    """What the remote side's preflight report says is missing on its host, or None."""
    if proc.returncode != 0:
        if "No module named" in proc.stderr:
            return (f"gluondist is not installed for {python}; install gluondist "
                    f"{__version__} there")
        return f"{python} -m {REMOTE} failed: {last}"
    try:
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"{python} -m {REMOTE} --preflight printed no report"
    if theirs.get("gluondist") != __version__ or theirs.get("protocol") != PROTOCOL:
        return (f"gluondist {theirs.get('gluondist')} (protocol {theirs.get('protocol')}) for "
                f"{python}, but the launcher runs gluondist {__version__} (protocol {PROTOCOL}); "
                f"install gluondist {__version__} there")
    if not theirs.get("mxnet"):
        return f"MXNet is not installed for {python}; install it there"
    return None


def check_hosts(hosts: Sequence[str], python: str, ssh_config: Optional[str] = None,
                timeout: float = PREFLIGHT_TIMEOUT, link: Link = Link()) -> Dict[str, HostProblem]:
    """Every host checked at once (see ``check_host``): {host: problem} for those that fail."""
    with ThreadPoolExecutor(max_workers=min(PREFLIGHT_THREADS, len(hosts)) or 1) as pool:
        problems = pool.map(lambda h: check_host(h, python, ssh_config, timeout, link), hosts)
        return {h: p for h, p in zip(hosts, problems) if p}


def preflight(hosts: Sequence[str], python: str, ssh_config: Optional[str] = None,
              timeout: float = PREFLIGHT_TIMEOUT, link: Link = Link()) -> None:
    """Raises LaunchError naming the first host (in the given order) that fails its check."""
    problems = check_hosts(hosts, python, ssh_config, timeout, link)
    for host in hosts:
        if host in problems:
            raise LaunchError(f"host {host}: {problems[host]}")


class Ssh(Backend):
    """Processes on the -H hosts (and --server-hosts), each through an ssh session whose far
    end is child/remote.py; every host is preflighted before the job and again before each
    restart, which leaves out those that fail."""

    name = "ssh"
    multi_host = takes_hosts = server_hosts = True
    error_file_home = "the remote side's"

    def check(self, options) -> None:
        if not options.hosts:
            raise LaunchError("--launcher ssh needs hosts: -H hostfile or -H host1:2,host2:2")
        super().check(options)

    def sent_env(self, env: Mapping[str, str]) -> Dict[str, str]:
        return forwarded_env(env)

    def preflight(self, options) -> None:
        preflight(list(dict.fromkeys(h.name for h in options.all_hosts)), options.python,
                  options.ssh_config, link=Link(options.link_timeout))

    def transport(self, options, env: Mapping[str, str]) -> SshTransport:
        self.preflight(options)
        return SshTransport(options.python, env, os.getcwd(), options.ssh_config,
                            Link(options.link_timeout))

    def unreachable(self, names, options) -> Dict[str, str]:
        problems = check_hosts(list(names), options.python, options.ssh_config,
                               link=Link(options.link_timeout))
        return {name: str(p) for name, p in problems.items() if p.unreachable}

    def reachable(self, hosts: Tuple, server_hosts: Tuple, options, attempt: int,
                  show: Show) -> Tuple[Tuple, Tuple]:
        names = list(dict.fromkeys(h.name for h in (*hosts, *server_hosts)))
        problems = check_hosts(names, options.python, options.ssh_config,
                               link=Link(options.link_timeout))
        for name, problem in problems.items():
            what = "is unreachable" if problem.unreachable else "fails its check"
            show(f"gluondist: host {name} {what} ({problem}): left out of attempt {attempt}",
                 True)
        return (tuple(h for h in hosts if h.name not in problems),
                tuple(h for h in server_hosts if h.name not in problems))


BACKEND = Ssh()
