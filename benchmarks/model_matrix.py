"""How close a 2-worker dist_sync job trains each net of the model matrix to one process
(docs/models.md; tests/e2e/test_models.py asserts the bounds).

Runs tests/scripts/models_job.py once as a 2-worker job (`gluondist launch -n 2 -s 1`) and
twice as one process with the global batch, on one device and on one device per worker's
slice (with the workers' one thread), then prints, for every model and way (fit, your own loop),
the largest relative difference ||a - b|| / ||b|| over its named arrays against each.

    python benchmarks/model_matrix.py [--batch 4] [--steps 2] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "models_job.py"
sys.path.insert(0, str(ROOT / "tests"))
import models  # noqa: E402

FIT = list(models.ZOO) + ["lstm", "gru", "attention"]
LOOP = ["resnet18_v1", "lstm", "attention"]


def specs(batch, steps, ctx):
    return json.dumps([{"model": m, "how": h, "batch": batch, "steps": steps, "ctx": ctx}
                       for h, names in (("fit", FIT), ("loop", LOOP)) for m in names])


def worst(got, want, names):
    return max((float(np.linalg.norm(got[k].astype(np.float64) - want[k]) /
                      max(np.linalg.norm(want[k]), 1e-30)) for k in names), default=0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4, help="per worker (default 4)")
    parser.add_argument("--steps", type=int, default=2, help="global batches (default 2)")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {w: Path(tmp, w) for w in ("job", "one", "two")}
        for p in paths.values():
            p.mkdir()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-m", "gluondist.cli", "launch", "-n", "2", "-s", "1",
                        str(SCRIPT), str(paths["job"]), specs(args.batch, args.steps, 1)],
                       check=True)
        for where, ctx in (("one", 1), ("two", 2)):
            subprocess.run([sys.executable, str(SCRIPT), str(paths[where]),
                            specs(args.batch * 2, args.steps, ctx)], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        rows = []
        for how, names in (("fit", FIT), ("loop", LOOP)):
            for m in names:
                got, one, two = (dict(np.load(paths[w] / f"{m}.{how}.0.npz"))
                                 for w in ("job", "one", "two"))
                stats = {k for k in two if k.endswith(("running_mean", "running_var"))}
                rows.append({"model": m, "how": how, "arrays": len(two),
                             "mbytes": round(sum(a.nbytes for a in two.values()) / 1e6, 1),
                             "batchnorm": bool(stats),
                             "one_device": worst(got, one, set(one) - stats),
                             "two_devices": worst(got, two, set(two) - stats),
                             "statistics_two_devices": worst(got, two, stats)})
                r = rows[-1]
                print(f"{m:18s} {how:4s} {r['arrays']:4d} arrays {r['mbytes']:6.1f} MB  "
                      f"1 device {r['one_device']:.1e}  2 devices {r['two_devices']:.1e}  "
                      f"statistics {r['statistics_two_devices']:.1e}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(["python"] + sys.argv),
                                               "batch": args.batch, "steps": args.steps,
                                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
