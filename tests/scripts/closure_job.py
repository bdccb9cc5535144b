"""A fit that leaves a closure in a long-lived module, as issue 28 (point 7) found:
`closure_job.py KIND` (KIND: excepthook sets ``sys.excepthook = lambda *a: ...``, fsync wraps
``os.fsync`` in a lambda). The closure's globals are this script's, which hold the net, whose
parameters hold the trainer, which holds the kvstore: all alive until the process ends.

Each worker writes, in the working directory: params.<rank>.npz and history.<rank>.json (the
trained net; the history fsync'd through whatever ``os.fsync`` is), atexit.<rank> from an
atexit handler, thread.<rank> from a thread that writes only once the main thread has ended,
and buffered.<rank>, left open and unflushed (only the exit writes it).
"""
import atexit
import json
import os
import sys
import threading

import numpy as np

import gluondist
from fit_job import data, net
from gluondist import kvstore

kind = sys.argv[1]
if kind == "excepthook":
    sys.excepthook = lambda *args: sys.__excepthook__(*args)
elif kind == "fsync":
    real_fsync = os.fsync
    os.fsync = lambda fd: real_fsync(fd)
else:
    sys.exit(f"closure_job.py: unknown KIND {kind!r}; use excepthook or fsync")

model = net()  # at module level, as in a user's script: the closure keeps it
train, _ = data()
history = gluondist.fit(model, train, epochs=2, batch_size=16, seed=5)
rank = kvstore.rank()
np.savez(f"params.{rank}.npz",
         **{k: p.data().asnumpy() for k, p in model._collect_params_with_prefix().items()})
with open(f"history.{rank}.json", "w") as f:
    json.dump(history.history, f)
    f.flush()
    os.fsync(f.fileno())


def write_atexit():
    with open(f"atexit.{rank}", "w") as f:
        f.write("ran")


def write_after_main():
    threading.main_thread().join()  # returns when the interpreter (or bootstrap) ends main
    with open(f"thread.{rank}", "w") as f:
        f.write("joined")


atexit.register(write_atexit)
threading.Thread(target=write_after_main).start()
buffered = open(f"buffered.{rank}", "w")
buffered.write("buffered")
