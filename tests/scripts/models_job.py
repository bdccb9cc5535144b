"""The model matrix as a job's workers: `models_job.py OUT_DIR SPECS_JSON`.

SPECS_JSON is a list of ``{"model": NAME, "how": "fit" | "loop", "batch": B, "steps": S,
"ctx": C}`` (see tests/models.py); each is trained in turn, in this one process, and its
arrays are written to OUT_DIR/<model>.<how>.<rank>.npz (those of its first device; of device
d > 0 to <model>.<how>.<rank>.cpu<d>.npz). In a job, each worker then prints the chunk size
the job chose for itself (gluondist.kv.tuning).
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import models  # noqa: E402
from gluondist import kvstore  # noqa: E402
from gluondist.kv import tuning  # noqa: E402


def main():
    out, specs = sys.argv[1], json.loads(sys.argv[2])
    for spec in specs:
        train = models.train_fit if spec["how"] == "fit" else models.train_loop
        net = train(spec["model"], spec["batch"], spec["steps"], spec.get("ctx", 1))
        name = f"{spec['model']}.{spec['how']}.{kvstore.rank()}"
        for d, ctx in enumerate(net.collect_params().list_ctx()):
            np.savez(os.path.join(out, f"{name}{f'.cpu{d}' if d else ''}.npz"),
                     **models.params(net, ctx))
        print(f"trained {spec['model']} through {spec['how']}", flush=True)
    if kvstore.num_workers() > 1:
        print(f"chose chunks of {tuning.chosen()} bytes", flush=True)


if __name__ == "__main__":
    main()
