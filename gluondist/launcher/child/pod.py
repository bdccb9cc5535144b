"""The container command of a Kubernetes job (see gluondist/launcher/kubernetes.py),
``python -m gluondist.launcher.child.pod --servers S --kvstore K [--role R] -- COMMAND ...``.

In one Indexed Job for the whole job the completion index picks the role: index 0 runs the
scheduler, the next S the servers (MXNet's server loop), the rest the workers (COMMAND under
the worker bootstrap, so a failure exits with the script's code at once). With ``--role`` (one
Indexed Job per role) the index is the rank within that role. The role's environment comes
from roles.py, as for every other launcher. This process stays as the container's PID 1: it
passes SIGTERM (Kubernetes ending the pod) to every process of the role's session, which PID
1's default of ignoring SIGTERM would not, and exits with the role's code.
Standard library only.
"""
import argparse
import os
import signal
import subprocess
import sys

from ...envvars import JOB_COMPLETION_INDEX as INDEX
from ..roles import role_env, role_of_index, server_argv, worker_argv
from . import POD
from .proctree import exit_status, signal_exit, signal_tree, stop_tree


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {POD}")
    parser.add_argument("--servers", type=int, required=True)
    parser.add_argument("--kvstore", default="dist_sync")
    parser.add_argument("--role", choices=("scheduler", "server", "worker"))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if INDEX not in os.environ or not command:
        parser.error(f"needs {INDEX} (an Indexed Job's pod) and a command after --")
    index = int(os.environ[INDEX])
    role, rank = (args.role, index) if args.role else role_of_index(index, args.servers)
    env = {**os.environ, **role_env(role, rank, args.kvstore)}
    run = worker_argv(command, sys.executable) if role == "worker" else server_argv(sys.executable)
    child = subprocess.Popen(list(run), env=env, start_new_session=True)

    stopped = []

    def stop(signum, frame):
        # No child.wait() here: the interrupted wait below holds Popen's lock. Pass the signal
        # on, make sure with SIGKILL later, and let that wait return.
        stopped.append(signum)
        stop_tree(child.pid)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = child.wait()
    signal_tree(child.pid, signal.SIGKILL)  # whatever the role left behind
    if stopped:
        return signal_exit(stopped[0])
    return exit_status(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
