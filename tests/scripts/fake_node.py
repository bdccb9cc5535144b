"""A stand-in for a ps-lite node, without MXNet, for the launcher's fast tests (fake_backend.py).

As the scheduler or a server (``fake_node.py``, DMLC_ROLE from the plan) it prints ps-lite's
join line; the scheduler says the job formed once every node joined and, like ps-lite's, both
end with 0 once every worker finished. Nodes meet in a directory of the attempt's own under
FAKE_DIR (named by the scheduler's port): ``joined.<pid>`` per node, ``done.<rank>`` per
finished worker. A scheduler whose port is taken exits as
gluondist's own (launcher/child/server.py) does. Workers import :func:`join` and :func:`done`.
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from gluondist import wire  # noqa: E402
from gluondist.launcher.child.server import port_taken  # noqa: E402

TICK = 0.02


def meeting() -> str:
    path = os.path.join(os.environ["FAKE_DIR"], os.environ["DMLC_PS_ROOT_PORT"])
    os.makedirs(path, exist_ok=True)
    return path


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] ps-lite/src/van.cc:1: {text}", flush=True)


def join() -> None:
    """Join the job as ps-lite would: its line on the output, a file for the scheduler; then
    wait until every node joined (ps-lite's start blocks until the job forms)."""
    role = os.environ["DMLC_ROLE"]
    say(f"Bind to role={role}, ip=127.0.0.1, port={os.getpid()}")
    open(os.path.join(meeting(), f"joined.{os.getpid()}"), "w").close()
    while _count("joined.") < _nodes():
        time.sleep(TICK)


def _nodes() -> int:
    """Every node of the job: the scheduler, the servers, the workers."""
    return 1 + int(os.environ["DMLC_NUM_WORKER"]) + int(os.environ["DMLC_NUM_SERVER"])


def done() -> None:
    """This worker finished: then wait for the others, as MXNet's exit barrier does."""
    rank = os.environ["GLUONDIST_RANK"]
    open(os.path.join(meeting(), f"done.{rank}"), "w").close()
    while _count("done.") < int(os.environ["DMLC_NUM_WORKER"]):
        time.sleep(TICK)


def _count(prefix: str) -> int:
    return sum(1 for name in os.listdir(meeting()) if name.startswith(prefix))


def main() -> int:
    role = os.environ["DMLC_ROLE"]
    if role == "scheduler" and port_taken():
        print(f"gluondist scheduler: port {os.environ['DMLC_PS_ROOT_PORT']} is taken; stopping",
              flush=True)
        return wire.PORT_TAKEN
    workers = int(os.environ["DMLC_NUM_WORKER"])
    join()
    if role == "scheduler":
        say(f"the scheduler is connected to {workers} workers and "
            f"{os.environ['DMLC_NUM_SERVER']} servers")
    while _count("done.") < workers:
        time.sleep(TICK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
