"""One worker of ``gluondist bench kvstore``:
``worker.py MBYTES KEYS STEPS [CHUNK_BYTES ...] [compression=none,fp16,2bit]``.

Trains nothing, but communicates exactly as ``fit`` does: MBYTES of float32 parameters in KEYS
arrays (a model's layers) behind a ``make_trainer`` trainer, whose ``allreduce_grads`` pushes and
pulls every gradient each step, in chunks of CHUNK_BYTES (one measurement per value given,
each with a trainer of its own; 0 sends each array whole). First a raw TCP probe between two
of the job's hosts measures the link (probe.py). Worker 0 prints one line (gluondist.wire.Bench)
``gluondist-bench {...}``: the step time of each measurement (the slowest worker's) and the
probe's rate. With several compressions (fit's ``compression=``, in that order; 2bit last, as
MXNet keeps it for the process) every chunk size is measured with each.
"""
import sys
import time

# absolute imports: the launcher runs this file by its path, as a script
from gluondist import kvstore, wire
from gluondist._mx import mx
from gluondist.bench.kvstore import key_sizes
from gluondist.bench.probe import probe

WARMUP = 3
PROBE_BYTES = (4 << 20, 256 << 20)  # at least 4 MiB, at most 256: a short probe


def measure(sizes, steps: int, chunk_bytes: int, compression: str = "none") -> float:
    params = [mx.gluon.Parameter(f"bench{i}", shape=(n,)) for i, n in enumerate(sizes)]
    for p in params:
        p.initialize(mx.init.Zero())
        p.grad()[:] = 1
    trainer = kvstore.make_trainer(params, "sgd", kvstore="dist_sync", chunk_bytes=chunk_bytes,
                                   compression=None if compression == "none" else compression)
    # every gradient is ready when the step starts: no backward to overlap, no step to time
    trainer.exchange.order.measured = False
    for _ in range(WARMUP):
        trainer.allreduce_grads()
        mx.nd.waitall()
    kvstore.barrier()
    start = time.perf_counter()
    for _ in range(steps):  # one training step's communication: push every key, pull it back
        trainer.allreduce_grads()
        mx.nd.waitall()
    elapsed = time.perf_counter() - start
    return float(kvstore.allgather([elapsed / steps])[:, 0].max())  # the slowest worker's


def main(mbytes: float, keys: int, steps: int, chunks, compressions=("none",)) -> None:
    kvstore.create("dist_sync")
    sizes = key_sizes(mbytes, keys)
    nbytes = 4 * sum(sizes)
    rate = probe(min(max(nbytes, PROBE_BYTES[0]), PROBE_BYTES[1]))
    step_s = [measure(sizes, steps, c, z) for z in compressions for c in chunks]
    if kvstore.rank() == 0:
        print(wire.encode(wire.Bench({"step_s": step_s, "chunk_bytes": chunks,
                                      "compression": list(compressions),
                                      "bytes": nbytes, "tcp_bytes_per_s": rate})), flush=True)


if __name__ == "__main__":
    rest = [a for a in sys.argv[4:] if not a.startswith("compression=")]
    named = [a.split("=", 1)[1].split(",") for a in sys.argv[4:] if a.startswith("compression=")]
    main(float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
         [int(c) for c in rest] or [kvstore.CHUNK_BYTES], named[-1] if named else ["none"])
