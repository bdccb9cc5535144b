"""`gluondist bench kvstore` at this tree and at an earlier commit, alternately, in one run: how a
change moved the kvstore's step time (issue 34 asks that `gluondist bench kvstore -n 2 --mbytes
1` be no slower than before). With ``--peer-train``, benchmarks/peers.py's training instead
(peer_train.py through ``fit``: the 8 MB-layer MLP, 64 KiB chunks) in a 2-worker, 2-server job
on loopback, its median epoch after the first.

    python benchmarks/against_commit.py COMMIT [--repeats N] [--json FILE] -- BENCH_ARGS...
    python benchmarks/against_commit.py COMMIT --peer-train [--repeats N] [--json FILE]

The commit is checked out in a temporary git worktree and run by an interpreter of its own (a
venv whose only path file puts that worktree before this environment's site-packages, so the
launcher's workers and servers import the commit's gluondist and this environment's MXNet).
Each repeat runs `gluondist bench kvstore BENCH_ARGS --json` once for each tree, in alternating
order; the result is each server count's median step time for each tree and their ratio."""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit_python(commit: str, where: str) -> str:
    """An interpreter that imports gluondist from ``commit`` (checked out under ``where``)."""
    tree, venv = os.path.join(where, "tree"), os.path.join(where, "venv")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach", tree, commit],
                   check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True,
                             text=True).stdout.strip()
    with open(os.path.join(purelib, "commit.pth"), "w") as f:
        f.write(f"{tree}\n{sysconfig.get_paths()['purelib']}\n")
    return python


def bench(python: str, root: str, args) -> dict:
    """``{servers: step_s}`` of one `gluondist bench kvstore ARGS --json` run, in ``root``."""
    run = subprocess.run([python, "-m", "gluondist.cli", "bench", "kvstore", *args, "--json"],
                         capture_output=True, text=True, cwd=root, timeout=600)
    if run.returncode != 0:
        sys.exit(f"gluondist bench kvstore {' '.join(args)} failed under {python}:\n"
                 f"{run.stderr.strip()[-2000:]}")
    rows = json.loads(run.stdout.strip().splitlines()[-1])["rows"]
    return {str(r["servers"]): r["step_s"] for r in rows}


def peer_train(python: str, root: str, epochs: int = 4) -> dict:
    """``{"2": median epoch s after the first}`` of one peer_train.py job (2 workers, 2
    servers, GLUONDIST_CHUNK_BYTES=65536, the setting of peers.py's runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "epochs.json")
        run = subprocess.run([python, "-m", "gluondist.cli", "launch", "-n", "2", "-s", "2",
                              "--env", "GLUONDIST_CHUNK_BYTES=65536",
                              os.path.join(root, "benchmarks", "peer_train.py"), "gluondist",
                              out, str(epochs)], capture_output=True, text=True, cwd=root,
                             timeout=600)
        if run.returncode != 0:
            sys.exit(f"peer_train.py failed under {python}:\n{run.stderr.strip()[-2000:]}")
        with open(out) as f:
            return {"2": statistics.median(json.load(f)["epoch_seconds"][1:])}


def check_sides(sides: dict, commit: str) -> None:
    """Each side imports the gluondist of its own tree (exits saying which does not)."""
    for name, (python, root) in sides.items():
        where = subprocess.run([python, "-c", "import gluondist; print(gluondist.__file__)"],
                               capture_output=True, text=True, cwd=root).stdout.strip()
        if os.path.dirname(os.path.dirname(where)) != os.path.realpath(root):
            sys.exit(f"{name} imports gluondist from {where}, not from {root}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the earlier commit, such as 3a28597")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--peer-train", action="store_true",
                        help="time peers.py's training (fit, 64 KiB chunks) instead")
    parser.epilog = "After --, gluondist bench kvstore's own arguments (default -n 2 --mbytes 1)."
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    opts = parser.parse_args(argv[:cut])
    args = argv[cut + 1:] or ["-n", "2", "--mbytes", "1"]
    with tempfile.TemporaryDirectory() as where:
        try:
            # each side runs in its own tree: `python -m` imports gluondist from the working
            # directory first, and so do the launcher's workers and servers
            sides = {"this tree": (sys.executable, ROOT),
                     opts.commit: (commit_python(opts.commit, where), os.path.join(where, "tree"))}
            check_sides(sides, opts.commit)
            runs = {name: [] for name in sides}
            for rep in range(opts.repeats):
                order = list(sides.items())
                for name, (python, root) in (order if rep % 2 == 0 else order[::-1]):
                    runs[name].append(peer_train(python, root) if opts.peer_train
                                      else bench(python, root, args))
                    print(f"repeat {rep + 1}, {name}: {runs[name][-1]}", flush=True)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force",
                            os.path.join(where, "tree")], capture_output=True)
    medians = {name: {s: statistics.median(r[s] for r in rs) for s in rs[0]}
               for name, rs in runs.items()}
    ratio = {s: now / medians[opts.commit][s] for s, now in medians["this tree"].items()}
    for s in ratio:
        what = "2 workers: an epoch" if opts.peer_train else f"{s} server(s): a step"
        print(f"{what}: {medians['this tree'][s] * 1e3:.2f} ms against "
              f"{medians[opts.commit][s] * 1e3:.2f} ms at {opts.commit}: {ratio[s]:.3f}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"command": shlex.join(["python", *sys.argv]), "commit": opts.commit,
                       "bench_args": None if opts.peer_train else args,
                       "measured": "peer_train.py epoch_s" if opts.peer_train else "step_s",
                       "runs": runs, "median_step_s": medians,
                       "ratio": ratio, "load_1min": os.getloadavg()[0]}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
