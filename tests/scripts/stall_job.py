"""A worker for stall tests: `stall_job.py MODE RANK [STEPS]`.

Every worker runs a hand-written dist_sync loop of STEPS (default 400) push/pull steps, calling
gluondist.heartbeat.beat() after each (MODE `beat`) or not (MODE `quiet`: the launcher judges it
by CPU time). Worker RANK (or `all`) writes
<rank>.stuck and sleeps forever in stuck_forever() after 20 steps; its peers block in the
kvstore. Finished workers write <rank>.done.
"""
import os
import sys
import time

from gluondist import heartbeat

mode, target = sys.argv[1], sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 400
rank = int(os.environ["GLUONDIST_RANK"])
acts = target in ("all", str(rank))

import mxnet as mx  # noqa: E402

kv = mx.kv.create("dist_sync")
kv.init(0, mx.nd.zeros((4,)))
out = mx.nd.zeros((4,))


def stuck_forever():
    open(f"{rank}.stuck", "w").close()
    while True:
        time.sleep(1)


for step in range(steps):
    if acts and step == 20:
        stuck_forever()
    kv.push(0, mx.nd.ones((4,)))
    kv.pull(0, out=out)
    out.wait_to_read()
    if mode == "beat":
        heartbeat.beat()
    time.sleep(0.01)
open(f"{rank}.done", "w").close()
