"""A worker without MXNet for the launcher's fast tests: ``fake_worker.py ACTION [ARG]...``,
run under gluondist's real bootstrap. It joins the fake job (fake_node.py) unless the ACTION is
``nojoin``, does its ACTION, then says it is done. Actions, each with worker ranks in ``on``:
``ok``; ``exit CODE ON``; ``raise ON``; ``kill SIG ON`` (kills itself); ``hang ON`` (beats
the heartbeat 3 times, then sleeps); ``nojoin ON`` (never joins); ``flaky CODE ON`` (exits CODE on
the first attempt, succeeds on a restart); ``sleep SECONDS``; ``beat SECONDS`` (a heartbeat
every 0.1 s); ``busy SECONDS`` (CPU, no heartbeat); ``quiet ON`` (no heartbeat, idle forever);
``late SECONDS`` (joins that late)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_node  # noqa: E402

from gluondist import heartbeat  # noqa: E402

action, args = sys.argv[1], sys.argv[2:]
rank = int(os.environ["GLUONDIST_RANK"])
restart = int(os.environ["GLUONDIST_RESTART_COUNT"])


def mine(ranks: str) -> bool:
    return str(rank) in ranks.split(",")


if action == "late":
    time.sleep(float(args[0]))
never = action == "nojoin" and mine(args[0])
if not never:
    fake_node.join()
print(f"worker {rank} running {action}", flush=True)
if action == "exit" and mine(args[1]):
    sys.exit(int(args[0]))
if action == "raise" and mine(args[0]):
    raise RuntimeError(f"worker {rank} failed on purpose")
if action == "kill" and mine(args[1]):
    os.kill(os.getpid(), getattr(signal, args[0]))
if action == "flaky" and restart == 0 and mine(args[1]):
    sys.exit(int(args[0]))
if action == "hang" and mine(args[0]):
    for _ in range(3):
        heartbeat.beat()
    time.sleep(600)
if never or action == "hang":
    time.sleep(600)
if action == "sleep":
    time.sleep(float(args[0]))
if action == "quiet" and mine(args[0]):
    time.sleep(600)
end = time.monotonic() + (float(args[0]) if action in ("beat", "busy") else 0)
while time.monotonic() < end:
    if action == "beat":
        heartbeat.beat()
        time.sleep(0.1)
fake_node.done()
