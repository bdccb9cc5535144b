"""A worker without MXNet for the launcher's fast tests: ``fake_worker.py ACTION [ARG]...``,
run under gluondist's real bootstrap. It joins the fake job (fake_node.py) unless the ACTION is
``nojoin``, does its ACTION, then says it is done. Actions, each with worker ranks in ``on``:
``ok``; ``exit CODE ON``; ``raise ON``; ``kill SIG ON`` (kills itself); ``hang ON`` (beats
the heartbeat 3 times, writes FAKE_DIR/<rank>.hanging, then sleeps); ``stubborn ON`` (``hang``
ignoring SIGTERM, with a child in a process group of its own that writes
FAKE_DIR/<its parent's pid>.grandchild); ``nojoin ON`` (never joins); ``flaky CODE ON`` (exits
CODE on the first attempt, succeeds on a restart); ``sleep SECONDS``; ``beat SECONDS`` (a
heartbeat every 0.1 s); ``busy SECONDS`` (CPU, no heartbeat); ``quiet ON`` (no heartbeat, idle
forever); ``late SECONDS`` (joins that late); ``epochs WORKERS [MOST]`` (epochs of 0.1 s until the
job has WORKERS workers, or MOST epochs ran, leaving with gluondist.elastic.EXIT when the launcher asks; each
worker appends the job's worker count to FAKE_DIR/workers); ``unicode ON`` (writes 3,000 lines of UTF-8, more
than a pipe holds, then ``unicode done``); ``deep ON`` (raises from 60 nested calls, a
traceback longer than the launcher's log tail); ``raisefirst ON`` (raises an error that is slow
to format, writing FAKE_DIR/<rank>.raising while it is formatted, after the bootstrap took its
failure time; every other worker raises once it sees that file)."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_node  # noqa: E402

from gluondist import elastic, heartbeat  # noqa: E402

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
if "FAKE_DIR" in os.environ:
    open(os.path.join(os.environ["FAKE_DIR"], f"{rank}.running"), "w").close()


def after_every_worker_ran() -> None:
    """Wait (60 s at most) until every worker printed its running line: one that fails sooner
    gets the others stopped before they print it, on a busy machine."""
    if "FAKE_DIR" not in os.environ:
        return
    every = [os.path.join(os.environ["FAKE_DIR"], f"{r}.running")
             for r in range(int(os.environ["DMLC_NUM_WORKER"]))]
    deadline = time.monotonic() + 60
    while not all(map(os.path.exists, every)) and time.monotonic() < deadline:
        time.sleep(0.02)


if action == "exit" and mine(args[1]):
    after_every_worker_ran()
    sys.exit(int(args[0]))
if action == "raise" and mine(args[0]):
    raise RuntimeError(f"worker {rank} failed on purpose")
if action == "kill" and mine(args[1]):
    os.kill(os.getpid(), getattr(signal, args[0]))
if action == "flaky" and restart == 0 and mine(args[1]):
    sys.exit(int(args[0]))
if action == "unicode" and mine(args[0]):
    for i in range(3000):
        sys.stdout.buffer.write(f"ünïcödé ✓ line {i} of the worker's output\n".encode())
    sys.stdout.buffer.flush()
    print("unicode done", flush=True)
if action == "deep" and mine(args[0]):  # 61 distinct frames (Python folds repeats of one)
    chain = "".join(f"def nested{i}():\n    nested{i + 1}()\n" for i in range(60))
    chain += "def nested60():\n    raise ValueError('the real cause, 60 calls down')\n"
    scope = {}
    exec(compile(chain, "nested.py", "exec"), scope)
    scope["nested0"]()
if action == "raisefirst" and mine(args[0]):
    class SlowToFormat(RuntimeError):
        def __str__(self):
            # formatted once the bootstrap caught it and took its time: any other worker's
            # failure is later from now on, however the OS schedules the two
            open(os.path.join(os.environ["FAKE_DIR"], f"{rank}.raising"), "w").close()
            time.sleep(1.0)
            return f"worker {rank} failed first"
    raise SlowToFormat()
if action == "raisefirst":
    while not any(n.endswith(".raising") for n in os.listdir(os.environ["FAKE_DIR"])):
        time.sleep(0.01)
    raise RuntimeError(f"worker {rank} saw a peer fail")
if action == "stubborn" and mine(args[0]):
    subprocess.Popen([sys.executable, "-c", "import os, sys, time\nos.setpgrp()\n"
                      "open(os.path.join(sys.argv[1], '%d.grandchild' % os.getppid()), 'w')"
                      ".close()\ntime.sleep(600)", os.environ["FAKE_DIR"]])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if action in ("hang", "stubborn") and mine(args[0]):
    for _ in range(3):
        heartbeat.beat()
    open(os.path.join(os.environ["FAKE_DIR"], f"{rank}.hanging"), "w").close()
    time.sleep(600)
if never or action in ("hang", "stubborn"):
    time.sleep(600)
if action == "sleep":
    time.sleep(float(args[0]))
if action == "epochs":  # "epochs" of 0.1 s until the job has WORKERS, the launcher's request
    with open(os.path.join(os.environ["FAKE_DIR"], "workers"), "a") as f:  # to resize obeyed
        f.write(f"{os.environ['DMLC_NUM_WORKER']}\n")
    for _ in range(int(args[1]) if len(args) > 1 else 3000):
        if int(os.environ["DMLC_NUM_WORKER"]) >= int(args[0]):
            break
        time.sleep(0.1)
        if elastic.requested():
            fake_node.done()
            sys.exit(elastic.EXIT)
if action == "quiet" and mine(args[0]):
    time.sleep(600)
end = time.monotonic() + (float(args[0]) if action in ("beat", "busy") else 0)
while time.monotonic() < end:
    if action == "beat":
        heartbeat.beat()
        time.sleep(0.1)
fake_node.done()
