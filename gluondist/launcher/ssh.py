"""Start a plan's processes on other hosts over ssh.

ssh runs non-interactively (BatchMode: no password prompt can hang the job). The remote side is
a short Python program (WRAPPER) that reads the process's argv, environment and working
directory as one JSON line from stdin, so none of it is quoted into a shell or shown by `ps`,
then runs the command in its own session and keeps reading stdin: when stdin ends (the
launcher stopped, died, or lost its connection) it kills the command's whole process tree.

For a worker the session's stderr is a side channel (see process.py): the wrapper lends its own
stderr to the worker's heartbeat (GLUONDIST_PROGRESS_FD), reports the worker tree's CPU time
every second, and relays the bootstrap's error file once the worker ends. A line ``dump`` on
stdin makes it send the worker the signal that dumps its stacks.
"""
from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Mapping, Optional, Sequence

from .. import envvars as ev
from .errors import LaunchError
from .plan import ProcessSpec

# Names never forwarded: they describe the launcher's own host or session, or are set per
# process by the plan.
DENY = {"HOME", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME", "HOSTNAME", "TERM", "DISPLAY",
        "SHLVL", "_", "MAIL", "TMPDIR", "LS_COLORS", "PS1", "KRB5CCNAME", "XAUTHORITY",
        ev.CUDA_VISIBLE_DEVICES}
DENY_PREFIXES = ("SSH_", "XDG_", "DMLC_", "PS_", "GLUONDIST_", "BASH_FUNC_")

WRAPPER = r"""
import json, os, shutil, signal, subprocess, sys, tempfile, threading, time
job = json.loads(sys.stdin.readline())
try:
    os.chdir(job["cwd"])
except OSError as e:
    print("gluondist: cannot enter %s on this host: %s" % (job["cwd"], e.strerror), flush=True)
    sys.exit(2)
env = dict(os.environ)
env.update(job["env"])
side, fds, error_file = job.get("side"), (), None
if side:
    error_file = os.path.join(tempfile.mkdtemp(prefix="gluondist-"), "error.json")
    env[@ERROR_FILE@] = error_file
    if job.get("progress"):
        fds = (os.dup(2),)
        env[@PROGRESS_FD@] = str(fds[0])
child = subprocess.Popen(job["argv"], env=env, stdin=subprocess.DEVNULL,
                         stderr=subprocess.STDOUT if side else None, start_new_session=True,
                         pass_fds=fds)
for fd in fds:
    os.close(fd)
def say(text):
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass
stopping = []
def killpg(sig):
    try:
        os.killpg(child.pid, sig)
    except OSError:
        pass
def stop(*_):
    # No child.wait() here: a signal handler interrupts the main thread's wait, which holds
    # Popen's lock. Pass SIGTERM on, SIGKILL 3 s later; the main thread's wait then returns.
    stopping.append(1)
    killpg(signal.SIGTERM)
    timer = threading.Timer(3.0, killpg, (signal.SIGKILL,))
    timer.daemon = True
    timer.start()
def watch():
    line = sys.stdin.readline()
    while line:
        if line.strip() == "dump":
            try:
                os.kill(child.pid, signal.SIGUSR1)
            except OSError:
                pass
        line = sys.stdin.readline()
    stop()
def cpu():
    tick = os.sysconf("SC_CLK_TCK")
    while child.poll() is None:
        total = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/stat" % pid, "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == child.pid:
                total += int(fields[11]) + int(fields[12])
        say("gluondist-cpu %.2f" % (total / tick))
        time.sleep(1.0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGHUP, stop)
threading.Thread(target=watch, daemon=True).start()
if job.get("progress"):
    threading.Thread(target=cpu, daemon=True).start()
code = child.wait()
killpg(signal.SIGKILL)  # whatever the command left behind
if stopping:
    os._exit(128 + signal.SIGTERM)
if error_file:
    try:
        with open(error_file) as f:
            say("gluondist-error " + json.dumps(json.load(f)))
    except (OSError, ValueError):
        pass
    shutil.rmtree(os.path.dirname(error_file), ignore_errors=True)
sys.exit(128 - code if code < 0 else code)
"""

# the variable names come from envvars, like everyone else's
WRAPPER = WRAPPER.replace("@ERROR_FILE@", repr(ev.GLUONDIST_ERROR_FILE)).replace(
    "@PROGRESS_FD@", repr(ev.GLUONDIST_PROGRESS_FD))

PREFLIGHT = ("import importlib.util, sys; "
             "sys.exit(0 if importlib.util.find_spec('mxnet') else 3)")


def forwarded_env(base_env: Mapping[str, str]) -> Dict[str, str]:
    """The launcher's environment minus what describes its own host or session."""
    return {k: v for k, v in base_env.items()
            if k not in DENY and not k.startswith(DENY_PREFIXES)}


def ssh_argv(host: str, remote: Sequence[str], ssh_config: Optional[str] = None) -> List[str]:
    """The ssh command running ``remote`` on ``host``. The one place a command is quoted into a
    string, because ssh hands the remote shell a single string."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
    if ssh_config:
        argv += ["-F", ssh_config]
    return argv + [host, shlex.join(remote)]


class SshTransport:
    """Starts each spec on its host through ssh; the process group treats it like a local one
    (killing the local ssh ends the remote tree through the wrapper)."""

    def __init__(self, python: str, base_env: Mapping[str, str], cwd: str,
                 ssh_config: Optional[str] = None):
        self.python, self.cwd, self.ssh_config = python, cwd, ssh_config
        self.env = forwarded_env(base_env)

    def spawn(self, spec: ProcessSpec, progress: bool = False, error_file=None):
        """``error_file`` is the launcher's local path, unused: the wrapper picks a remote one
        and relays its record on the side channel, which every worker has."""
        side = spec.role == "worker"
        proc = subprocess.Popen(ssh_argv(spec.host, [self.python, "-c", WRAPPER], self.ssh_config),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if side else subprocess.STDOUT,
                                start_new_session=True)
        job = {"argv": list(spec.argv), "env": {**self.env, **spec.env}, "cwd": self.cwd,
               "side": side, "progress": progress}
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.flush()  # and keep it open: its end is the remote side's signal to stop
        return proc, (proc.stderr if side else None)

    def request_stack(self, proc: subprocess.Popen) -> None:
        try:
            proc.stdin.write(b"dump\n")
            proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def tree_cpu(self, child):
        return child.cpu


def preflight(hosts: Sequence[str], python: str, ssh_config: Optional[str] = None,
              timeout: float = 30.0) -> None:
    """Check every host at once: reachable, login works, MXNet importable by ``python``.
    Raises LaunchError naming the first host that fails."""
    def check(host):
        try:
            proc = subprocess.run(ssh_argv(host, [python, "-c", PREFLIGHT], ssh_config),
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"host {host}: no answer over ssh within {timeout:g}s"
        if proc.returncode == 3:
            return f"host {host}: MXNet is not installed for {python}; install it there"
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            return f"host {host}: ssh failed: {why}"
        return None

    with ThreadPoolExecutor(max_workers=min(16, len(hosts)) or 1) as pool:
        for problem in pool.map(check, hosts):
            if problem:
                raise LaunchError(problem)
