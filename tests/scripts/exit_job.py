"""A worker that fails with work to save: `exit_job.py MODE` (MODE: raise, exit, hang).

Every worker joins a dist_sync kvstore (so MXNet's exit barrier would wait for the others);
worker 1 then registers an atexit handler that writes atexit.1 (with MODE=hang it writes
atexit.1 and sleeps), writes `buffered` to buffered.1 without flushing or closing it, and
raises (MODE=exit: sys.exit(4)). Worker 0 keeps pushing, blocked on the missing peer."""
import atexit
import sys
import time

import mxnet as mx

mode = sys.argv[1]
kv = mx.kv.create("dist_sync")
kv.init(0, mx.nd.zeros((4,)))
out = mx.nd.zeros((4,))
if kv.rank == 1:
    def handler():
        with open("atexit.1", "w") as f:
            f.write("ran")
        if mode == "hang":
            time.sleep(600)
    atexit.register(handler)
    results = open("buffered.1", "w")  # never flushed nor closed: only the exit writes it
    results.write("buffered")
    if mode == "exit":
        sys.exit(4)
    raise RuntimeError("worker 1 failed with results unsaved")
while True:
    kv.push(0, mx.nd.ones((4,)))
    kv.pull(0, out=out)
    out.wait_to_read()
