"""One worker of ``gluondist bench kvstore``: ``worker.py MBYTES KEYS STEPS``.

Pushes and pulls MBYTES of float32 through the job's dist_sync kvstore every step, split into
KEYS arrays the way a model's layers are; worker 0 prints the job's step time (the slowest
worker's) as one line ``gluondist-bench {...}``.
"""
import json
import sys
import time


from gluondist import kvstore
from gluondist.bench import key_sizes
from gluondist._mx import mx

WARMUP = 3
FIRST_KEY = 0  # this process trains nothing: no trainer's keys to avoid


def main(mbytes: float, keys: int, steps: int) -> None:
    kv = kvstore.create("dist_sync")
    sizes = key_sizes(mbytes, keys)
    total = sum(sizes)
    ids = [FIRST_KEY + i for i in range(keys)]
    grads = [mx.nd.ones((n,)) for n in sizes]
    pulled = [mx.nd.zeros((n,)) for n in sizes]
    kv.init(ids, [mx.nd.zeros((n,)) for n in sizes])
    for _ in range(WARMUP):
        kv.pushpull(ids, grads, out=pulled)
        mx.nd.waitall()
    kv._barrier()
    start = time.perf_counter()
    for _ in range(steps):  # one training step's communication: push every key, pull it back
        kv.pushpull(ids, grads, out=pulled)
        mx.nd.waitall()
    elapsed = time.perf_counter() - start
    each = kvstore.allgather([elapsed / steps])[:, 0]  # every worker's step time
    if kv.rank == 0:
        print("gluondist-bench " + json.dumps({"step_s": float(each.max()),
                                              "worker_step_s": each.tolist(),
                                              "bytes": 4 * total}), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
