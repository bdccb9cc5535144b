"""fit on a RecordIO file: a worker's peak memory on a ~2 GB file against a ~20 MB one, and
fit's speed against a hand-written loop over the same DataLoader.

    python benchmarks/recordio.py [--big-mb 2048] [--small-mb 20] [--repeats 7] [--epochs 4]
                                  [--workers 2] [--dir DIR] [--json FILE] [--quick]

The files are written into a temporary directory (under ``--dir``) and deleted at the end:
records of 3x64x64 uint8 images (``gluondist.recordio.pack``; a bright square in one of ten
places gives the class, on noise), read back by ``gluondist.recordio.ArrayRecordDataset``.

1. **Memory.** A fresh Python process runs ``fit`` over a file (a small CNN, batch 64): one
   epoch of the big file, and as many epochs of the small one as make the same number of
   steps, since a process's memory takes a few hundred steps to settle (the allocator's pools,
   a DataLoader's batches in flight), and the figure is about the data's size. It reports its
   peak RSS (``VmHWM`` of /proc/self/status: ``ru_maxrss`` would
   not do, since Linux carries the parent's RSS at the fork over an exec into it), for the
   small file and the big one,
   both through the Dataset itself (read in fit's thread) and through a
   ``DataLoader(num_workers=--workers)``. The ratio big/small is the figure (target <= 1.15):
   fit holds no per-sample array but the epoch's permutation; MXNet's reader keeps the
   ``.idx`` in a dict and a list (100 to 170 bytes a record), which is in the figure.
2. **Speed.** On the small file, ``fit`` against the same training written by hand over the
   same ``DataLoader(num_workers=--workers, shuffle=True)``: the same net, batch, optimizer and
   epochs, the same per-epoch loss and accuracy summed on the device; alternated pairs
   (benchmarks/alternate.py), median fit/hand (target <= 1.05).

``--json FILE`` saves both, with the command that made them. ``--quick`` is a smoke run
(a 40 MB and a 4 MB file, 2 pairs of 1 epoch, no accuracy asked): it checks that the script
works, nothing more.
"""
import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

SHAPE = (3, 64, 64)
RECORD = int(np.prod(SHAPE))  # bytes of one image; a record adds a 24-byte header
BATCH = 64
OPT = {"learning_rate": 0.05, "momentum": 0.9}


def write_file(path, mbytes, seed):
    """About ``mbytes`` MB of records at ``path``.rec (and .idx); returns the record count."""
    import mxnet as mx
    from gluondist.recordio import pack
    count = max(BATCH * 2, int(mbytes * 2 ** 20 // (RECORD + 24)))
    rs = np.random.RandomState(seed)
    writer = mx.recordio.MXIndexedRecordIO(f"{path}.idx", f"{path}.rec", "w")
    for start in range(0, count, 1000):
        n = min(1000, count - start)
        images = rs.randint(0, 128, size=(n,) + SHAPE).astype(np.uint8)
        labels = rs.randint(0, 10, size=n)
        for i, (image, label) in enumerate(zip(images, labels)):
            row, col = divmod(int(label), 5)
            image[:, 16 + 24 * row:24 + 24 * row, 4 + 12 * col:12 + 12 * col] = 255
            writer.write_idx(start + i, pack(image, label))
    writer.close()
    return count


def cnn():
    from mxnet import gluon
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(8, 3, strides=2, activation="relu"), gluon.nn.MaxPool2D(),
            gluon.nn.Conv2D(16, 3, activation="relu"), gluon.nn.MaxPool2D(),
            gluon.nn.Flatten(), gluon.nn.Dense(10))
    net.hybridize()
    return net


def scaled(image):
    return image / 255  # pixels in [0, 1]


def dataset(rec):
    from gluondist.recordio import ArrayRecordDataset
    return ArrayRecordDataset(rec, SHAPE, "uint8").transform_first(scaled)


def loader(rec, workers):
    from mxnet import gluon
    return gluon.data.DataLoader(dataset(rec), batch_size=BATCH, shuffle=True,
                                 num_workers=workers)


def peak_rss_mb():
    """This process's peak RSS since its exec, in MB (Linux's VmHWM)."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kib / 1024


def memory_child(rec, workers, epochs):
    """In a fresh process: fit for ``epochs`` on ``rec``; prints its peak RSS (MB) as JSON."""
    import gc
    import time
    import gluondist
    data = loader(rec, workers) if workers else dataset(rec)
    before = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    start = time.perf_counter()
    history = gluondist.fit(cnn(), data, epochs=epochs, batch_size=BATCH, seed=0, progress=False,
                            optimizer_params=OPT)
    seconds = time.perf_counter() - start
    del data  # a DataLoader's pool ends and its processes are reaped: RUSAGE_CHILDREN has them
    gc.collect()
    # the loader's processes are forked (no exec): their peak counts the pages they share
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"peak_rss_mb": peak_rss_mb(),
                      "rss_before_fit_mb": before / 2 ** 20,
                      "loader_processes_peak_rss_mb": children,
                      "samples": len(dataset(rec)), "epochs": epochs, "seconds": seconds,
                      "accuracy": history.history["accuracy"][-1]}))


def memory(files, counts, workers):
    """{path: {"small": child's figures, "big": ..., "ratio": big/small peak RSS}}."""
    epochs = {"small": -(-counts["big"] // counts["small"]), "big": 1}  # the same steps
    out = {}
    for name, w in (("dataset", 0), (f"dataloader_{workers}_workers", workers)):
        runs = {}
        for size, rec in files.items():
            proc = subprocess.run([sys.executable, __file__, "--memory-child", rec,
                                   "--workers", str(w), "--epochs", str(epochs[size])],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"the memory run on {rec} failed:\n{proc.stderr}")
            runs[size] = json.loads(proc.stdout.strip().splitlines()[-1])
        runs["ratio"] = runs["big"]["peak_rss_mb"] / runs["small"]["peak_rss_mb"]
        print(f"memory, {name}: peak RSS {runs['small']['peak_rss_mb']:.0f} MB on "
              f"{runs['small']['samples']} records x {epochs['small']} epochs, "
              f"{runs['big']['peak_rss_mb']:.0f} MB on "
              f"{runs['big']['samples']}: ratio {runs['ratio']:.3f} (target <= 1.15)", flush=True)
        out[name] = runs
    return out


def by_hand(data, epochs, seed):
    import mxnet as mx
    from mxnet import autograd, gluon
    mx.random.seed(seed)
    net = cnn()
    net.initialize(mx.init.Xavier())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", OPT)
    for _ in range(epochs):
        loss_sum, correct, count = mx.nd.zeros((1,)), mx.nd.zeros((1,)), 0
        for x, label in data:
            x, label = x.as_in_context(mx.cpu()), label.as_in_context(mx.cpu())
            with autograd.record():
                out = net(x)
                loss = loss_fn(out, label)
            loss.backward()
            trainer.step(x.shape[0])
            loss_sum += loss.sum()
            correct += (out.argmax(axis=1) == label).sum()
            count += x.shape[0]
        history = (loss_sum.asscalar() / count, correct.asscalar() / count)
    return history


def with_fit(data, epochs, seed):
    import gluondist
    h = gluondist.fit(cnn(), data, epochs=epochs, seed=seed, progress=False,
                      optimizer_params=OPT)
    return h.history["loss"][-1], h.history["accuracy"][-1]


def speed(rec, workers, epochs, repeats, target, least):
    from alternate import alternate
    data = loader(rec, workers)
    with_fit(data, 1, 0)  # warm up both paths
    by_hand(data, 1, 0)

    def trained(results):  # both really trained (10 classes: 0.1 by chance)
        assert all(accuracy > least for _, accuracy in results.values()), results

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        alternate({"hand": lambda rep: by_hand(data, epochs, rep),
                   "fit": lambda rep: with_fit(data, epochs, rep)}, repeats, trained,
                  target=target, save=f.name)
        return json.load(open(f.name))


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--big-mb", type=float, default=2048)
    parser.add_argument("--small-mb", type=float, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="the DataLoader's processes")
    parser.add_argument("--dir", help="where to write the files (default: the system's temp)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="a smoke run at small sizes")
    parser.add_argument("--memory-child", metavar="REC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        return memory_child(args.memory_child, args.workers, args.epochs)
    if args.quick:
        args.big_mb, args.small_mb, args.repeats, args.epochs = 40, 4, 2, 1
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # alternate.py
    work = tempfile.mkdtemp(prefix="gluondist-recordio-", dir=args.dir)
    try:
        files, counts = {}, {}
        for size, mbytes, seed in (("small", args.small_mb, 1), ("big", args.big_mb, 2)):
            counts[size] = write_file(os.path.join(work, size), mbytes, seed)
            files[size] = os.path.join(work, f"{size}.rec")
            print(f"{size}: {os.path.getsize(files[size]) / 2 ** 20:.0f} MB, {counts[size]} "
                  f"records", flush=True)
        sizes = {size: os.path.getsize(rec) for size, rec in files.items()}
        result = {"command": shlex.join(["python", "benchmarks/recordio.py", *sys.argv[1:]]),
                  "record": f"{'x'.join(map(str, SHAPE))} uint8", "batch_size": BATCH,
                  "records": counts, "file_bytes": sizes,
                  "memory": memory(files, counts, args.workers),
                  "speed": speed(files["small"], args.workers, args.epochs, args.repeats, 1.05,
                                 0.5 if not args.quick else 0.0)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
