"""A worker for launcher tests: `job.py ACTION [RANK]` (RANK: the worker that acts, or 'all').

Every worker joins a dist_sync kvstore and runs a few push/pull rounds; then the acting worker
does ACTION (exit: sys.exit(3), raise, sigkill, hang: write
<rank>.hanging and sleep), while the others keep training, so they
block on the missing peer as real workers would. `deep` raises from 60 nested calls (a
traceback longer than the launcher's log tail); `raisefirst` makes the acting worker raise an error that
is slow to format and write <rank>.raising while it is being formatted (after the bootstrap took
its failure time, so the order of the two is unambiguous), and every other worker raise as soon
as it sees that file. `argv` prints the arguments and exits; `nojoin` makes the acting worker
sleep instead of joining; `stubborn` is `hang` ignoring SIGTERM, with a child
in a process group of its own; `linger T` makes it sleep,
after training, until the time T (time.time()); `unicode` makes it write 3,000 lines of UTF-8
(more than a pipe holds) and then `unicode done`. Finished workers write <rank>.done.
"""
import os
import signal
import sys
import time

action = sys.argv[1] if len(sys.argv) > 1 else "ok"
target = sys.argv[2] if len(sys.argv) > 2 else "none"
rank = int(os.environ["GLUONDIST_RANK"])
acts = target in ("all", str(rank))

if action == "argv":
    print("ARGV", sys.argv[1:])
    sys.exit(0)
if action == "nojoin" and acts:
    time.sleep(600)

import mxnet as mx  # noqa: E402

kv = mx.kv.create("dist_sync")
assert kv.rank == rank, (kv.rank, rank)
kv.init(0, mx.nd.zeros((4,)))
out = mx.nd.zeros((4,))


def train_round():
    kv.push(0, mx.nd.ones((4,)) * (rank + 1))
    kv.pull(0, out=out)
    out.wait_to_read()


for _ in range(3):
    train_round()
print(f"worker {rank} on {os.environ['DMLC_NODE_HOST']} pulled {out.asnumpy()[0]:g} "
      f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})", flush=True)
if acts:
    if action == "exit":
        sys.exit(3)
    if action == "raise":
        raise RuntimeError("boom in worker")
    if action == "deep":  # 61 distinct frames (Python folds repeats of one frame)
        chain = "".join(f"def nested{i}():\n    nested{i + 1}()\n" for i in range(60))
        chain += "def nested60():\n    raise ValueError('the real cause, 60 calls down')\n"
        scope = {}
        exec(compile(chain, "nested.py", "exec"), scope)
        scope["nested0"]()
    if action == "raisefirst":
        class SlowToFormat(RuntimeError):
            def __str__(self):
                # formatted only once the bootstrap caught it and took its time: from now on
                # any other worker's failure is later, however the OS schedules the two
                open(f"{rank}.raising", "w").close()
                time.sleep(1.0)  # e.g. a library error that gathers its context
                return "worker %d failed first" % rank
        raise SlowToFormat()
    if action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action in ("hang", "stubborn"):
        if action == "stubborn":  # also leaves a child in a process group of its own
            import subprocess
            subprocess.Popen([sys.executable, "-c", "import os, time\nos.setpgrp()\n"
                              "open('%d.grandchild' % os.getppid(), 'w').close()\n"
                              "time.sleep(600)"])
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(f"{rank}.hanging", "w").close()
        time.sleep(600)
    if action == "unicode":
        for i in range(3000):
            sys.stdout.buffer.write(f"ünïcödé ✓ line {i} of the worker's output\n".encode())
        sys.stdout.buffer.flush()
        print("unicode done", flush=True)
    if action == "linger":
        time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
if action == "raisefirst":
    while not any(name.endswith(".raising") for name in os.listdir(".")):
        time.sleep(0.01)
    raise RuntimeError(f"worker {rank} saw a peer fail")
if action in ("exit", "raise", "sigkill", "deep"):
    for _ in range(100000):  # blocks for good once the failed peer stops pushing
        train_round()
open(f"{rank}.done", "w").close()
