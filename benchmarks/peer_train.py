"""One worker of benchmarks/peers.py: the same training through gluondist's ``fit`` (under
``gluondist launch``) or through Horovod's ``DistributedTrainer`` (under ``horovodrun``).

    peer_train.py gluondist|gluondist-loop|gluondist-comm|compute|horovod|horovod-comm OUT EPOCHS
                  [MODEL [STEPS_LOG]]

MODEL ``mlp`` (the default): a net dominated by one 8 MB layer (Dense(2048) on 1,024 inputs,
then Dense(10)), random data, 64 samples per worker per step, 10 steps an epoch, no
hybridization on either side. MODEL a model-zoo name, with ``@SIZE`` for inputs of 3 x SIZE x
SIZE (default 32), such as ``resnet18_v1@96`` or ``mobilenet1.0``: that net with 10 classes,
hybridized on both sides, random images, 32 samples per worker per step, 4 steps an epoch.
Either way SGD with momentum, one OpenMP thread a worker. Worker 0 writes
``{"epoch_seconds": [...], "chunk_bytes": ..., "probe": ..., "order": ..., "busy_cores": [...]}``
to OUT,
each epoch timed to the end of its last update
(``mx.nd.waitall()``); with STEPS_LOG, also the wall clock of each step and epoch end (for the
link timelines).

Where an epoch goes (peers.py --parts): ``gluondist-loop`` trains in a hand-written loop of
gluondist's parts (``make_trainer``, ``TrainStep``) instead of ``fit``; ``gluondist-comm`` and
``horovod-comm`` take out the net's passes: one forward and backward in the first step of the
first epoch (which peers.py leaves out of its figure), then each step synchronises what the
gradient arrays hold and updates, so an epoch is the synchronisation and the update alone;
``compute`` is the other half: the net's passes and update, every worker at once but alone
(no kvstore), so an epoch is the compute alone.
Both sides write the sum over the workers back into the gradients, which so grow W-fold a
step: finite for 60 steps at W=4 (6 epochs) while the first gradients are below 250
(4**60 * 250 < float32's largest, 3.4e38); the bytes sent and the work per step are the same
whatever the values.
"""
import json
import os
import sys
import time

os.environ["OMP_NUM_THREADS"] = "1"  # before MXNet starts its pool: the same in both

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

BATCH, STEPS = 64, 10  # the MLP's; a model-zoo net's:
ZOO_BATCH, ZOO_STEPS = 32, 4
OPT = {"learning_rate": 0.01, "momentum": 0.9}


class Model:
    """MODEL (see the module's docstring): its net, data, batch and steps an epoch."""

    def __init__(self, text: str = "mlp"):
        self.name, _, size = text.partition("@")
        self.size = int(size) if size else 32
        zoo = self.name != "mlp"
        self.batch, self.steps = (ZOO_BATCH, ZOO_STEPS) if zoo else (BATCH, STEPS)
        self.shape = (3, self.size, self.size) if zoo else (1024,)

    def net(self):
        if self.name == "mlp":
            block = mx.gluon.nn.HybridSequential()
            block.add(mx.gluon.nn.Dense(2048, activation="relu", in_units=1024),
                      mx.gluon.nn.Dense(10, in_units=2048))
            return block
        block = mx.gluon.model_zoo.vision.get_model(self.name, classes=10)
        block.hybridize(static_alloc=True)
        return block

    def data(self, workers):
        rs = np.random.RandomState(0)
        n = self.batch * self.steps * workers
        return (rs.rand(n, *self.shape).astype(np.float32),
                rs.randint(0, 10, n).astype(np.float32))

    def sizes(self):
        """The elements of each array the workers exchange (those with gradients)."""
        block = self.net()
        block.initialize()
        block(mx.nd.zeros((1, *self.shape)))
        return [p.data().size for p in block.collect_params().values() if p.grad_req != "null"]


def net():  # the MLP's (benchmarks/issue_cost.py)
    return Model().net()


def data(workers):
    return Model().data(workers)


class Stamps:
    """Worker 0's wall clock when each step was issued (``(epoch, step, t)``) and when each
    epoch's last update ended (``(epoch, -1, t)``), for the link timelines."""

    def __init__(self, path):
        self.path, self.times = path, []

    def add(self, epoch, step=-1):  # a step: no wait, the schedule stays as it is
        if self.path:
            self.times.append((epoch, step, time.time()))

    def save(self):
        if self.path:
            with open(self.path, "w") as f:
                json.dump(self.times, f)


class Cores:
    """The machine's cores busy in each epoch: /proc/stat's busy share of all cores' time
    between worker 0's marks (every namespace host shares the machine's cores, so this is
    the whole job's CPU, servers and the kernel's network included), times the cores."""

    def __init__(self):
        self.marks, self.busy = [], []

    def mark(self, end: bool = False) -> None:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        self.marks.append((sum(ticks) - ticks[3] - ticks[4], sum(ticks)))  # idle, iowait
        if end:
            (b0, t0), (b1, t1) = self.marks[-2:]
            self.busy.append(round((b1 - b0) / max(t1 - t0, 1) * os.cpu_count(), 3))


CORES = Cores()


def with_gluondist(model, epochs, stamps):
    import gluondist

    class Stamp(gluondist.Callback):
        def on_epoch_begin(self, run, epoch):  # the window fit's epoch_seconds times
            CORES.mark()

        def on_batch_end(self, run, batch, logs):
            if run.rank == 0:
                stamps.add(run.epoch, batch)

        def on_epoch_end(self, run, epoch, logs):  # fit waited for the epoch's last update
            CORES.mark(end=True)
            if run.rank == 0:
                stamps.add(epoch)

    workers = gluondist.kvstore.num_workers()
    history = gluondist.fit(model.net(), model.data(workers), epochs=epochs,
                            batch_size=model.batch, seed=0,
                            progress=False, optimizer_params=OPT, callbacks=[Stamp()])
    if gluondist.kvstore.rank() == 0:
        return history.history["epoch_seconds"]
    return None


def with_gluondist_loop(model, epochs, stamps, passes=True):
    from gluondist import kvstore
    rank, workers = kvstore.rank(), kvstore.num_workers()
    mx.random.seed(0)
    block = initialized(model)
    kv = kvstore.create()
    trainer = kvstore.make_trainer(block.collect_params(), "sgd", dict(OPT), kv,
                                   batch_size=model.batch)
    step = kvstore.TrainStep(trainer, kv, [mx.cpu()], model.batch)
    return train_loop(model, block, lambda: step(model.batch * workers), rank, workers, epochs,
                      stamps, passes)


def with_gluondist_comm(model, epochs, stamps):
    return with_gluondist_loop(model, epochs, stamps, passes=False)


def with_compute(model, epochs, stamps):
    """The net's passes and update alone, each worker on its own (MXNet's Trainer, no
    kvstore), started by ``gluondist launch`` so that every host computes at once."""
    from gluondist import kvstore
    rank, workers = kvstore.rank(), kvstore.num_workers()
    mx.random.seed(0)
    block = initialized(model)
    trainer = mx.gluon.Trainer(block.collect_params(), "sgd", dict(OPT), kvstore=None)
    return train_loop(model, block, lambda: trainer.step(model.batch * workers), rank, workers,
                      epochs, stamps)


def initialized(model):
    """``model``'s net, initialized, its shapes known (a model-zoo net infers some)."""
    block = model.net()
    block.initialize(mx.init.Xavier())
    block(mx.nd.zeros((1, *model.shape)))
    return block


def train_loop(model, block, update, rank, workers, epochs, stamps, passes=True):
    """The epochs of a hand-written loop: ``update()`` after each batch's backward (with
    ``passes`` False, one forward and backward in the first step and none after)."""
    from mxnet import autograd, gluon
    X, y = model.data(workers)
    batch = model.batch
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    seconds = []
    for epoch in range(epochs):
        mx.nd.waitall()
        started = time.perf_counter()
        CORES.mark()
        for step in range(model.steps):
            if passes or (epoch, step) == (0, 0):
                rows = slice((step * workers + rank) * batch,
                             (step * workers + rank + 1) * batch)
                x, label = mx.nd.array(X[rows]), mx.nd.array(y[rows])
                with autograd.record():
                    loss = loss_fn(block(x), label)
                loss.backward()
            else:  # the same gradients again, which Trainer would refuse as stale
                for p in block.collect_params().values():
                    for d in p.list_data() if p.grad_req != "null" else ():
                        d._fresh_grad = True
            update()
            if rank == 0:
                stamps.add(epoch, step)
        mx.nd.waitall()
        seconds.append(time.perf_counter() - started)
        CORES.mark(end=True)
        if rank == 0:
            stamps.add(epoch)
    return seconds if rank == 0 else None


def with_horovod(model, epochs, stamps, passes=True):
    import horovod.mxnet as hvd
    hvd.init()
    rank, workers = hvd.rank(), hvd.size()
    block = initialized(model)
    params = block.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd", dict(OPT))
    return train_loop(model, block, lambda: trainer.step(model.batch), rank, workers, epochs,
                      stamps, passes)


def with_horovod_comm(model, epochs, stamps):
    return with_horovod(model, epochs, stamps, passes=False)


def chosen_chunk_bytes():
    """The chunk size this process's gluondist job chose for itself (None: none, or no
    gluondist imported)."""
    tuning = sys.modules.get("gluondist.kv.tuning")
    return None if tuning is None else tuning.chosen()


def chunk_probe():
    """What that choice rests on: each candidate size's seconds for one sum in the probe, by
    size, and the sums a measurement took (None: no probe, or no gluondist imported)."""
    tuning = sys.modules.get("gluondist.kv.tuning")
    probe = None if tuning is None else tuning.probed()
    return None if probe is None else {"seconds": {str(c): s for c, s in
                                                   probe["seconds"].items()},
                                       "sums": probe.get("sums")}


def chosen_order():
    """The order this process's gluondist job chose (gluondist.kv.order: backward's time, the
    exchange's alone, the head's share; None: not timed, or no gluondist imported)."""
    node = sys.modules.get("gluondist.kv.node")
    return None if node is None else node.NODE.send_order


def main():
    from positional import positional
    args = positional(__doc__, 3, 5)
    which, out, epochs = args[0], args[1], args[2]
    if not epochs.isdigit() or int(epochs) < 1:
        print(f"peer_train.py: EPOCHS {epochs!r} is not a whole number of at least 1",
              file=sys.stderr)
        sys.exit(2)
    epochs = int(epochs)
    try:
        model = Model(args[3] if len(args) > 3 else "mlp")
        model.net()
    except ValueError:
        print(f"peer_train.py: MODEL {args[3]!r} is not mlp or a model-zoo name (with @SIZE, a "
              "whole number, for SIZE x SIZE inputs), such as resnet18_v1@96", file=sys.stderr)
        sys.exit(2)
    stamps = Stamps(args[4] if len(args) > 4 else None)
    modes = {"gluondist": with_gluondist, "gluondist-loop": with_gluondist_loop,
             "gluondist-comm": with_gluondist_comm, "compute": with_compute,
             "horovod": with_horovod,
             "horovod-comm": with_horovod_comm}
    if which not in modes:
        print(f"peer_train.py: {which!r} is no way to train; give one of {', '.join(modes)}",
              file=sys.stderr)
        sys.exit(2)
    train = modes[which]
    seconds = train(model, epochs, stamps)
    if seconds is not None:
        with open(out, "w") as f:  # the chunk size a gluondist job chose (None: given, Horovod)
            json.dump({"epoch_seconds": seconds, "chunk_bytes": chosen_chunk_bytes(),
                       "probe": chunk_probe(), "order": chosen_order(),
                       "busy_cores": CORES.busy}, f)
        stamps.save()


if __name__ == "__main__":
    main()
