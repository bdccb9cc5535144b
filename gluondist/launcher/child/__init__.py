"""Code that runs inside the processes the launcher starts, each entry module a program of its
own (``python -m`` NAME below). The launcher names them only through these constants."""

BOOTSTRAP = __name__ + ".bootstrap"  # every worker, around the user's script
SERVER = __name__ + ".server"  # the scheduler and the servers
REMOTE = __name__ + ".remote"  # the far end of each ssh session
REAPER = __name__ + ".reaper"  # kills what the launcher started if the launcher dies
POD = __name__ + ".pod"  # a Kubernetes pod's PID 1


def source_path(module: str) -> str:
    """``module``'s file as it appears in a traceback's frames ("gluondist/.../bootstrap.py")."""
    return module.replace(".", "/") + ".py"
