"""A one-worker dist_async job (`async_optimizers.py`): for each built-in optimizer and
lr_scheduler below (all of them but Nadam, whose one momentum schedule for every
parameter makes its result depend on the order the keys reach the servers, and SGLD, which
adds random noise), train a small net for a few steps with make_trainer(kvstore='dist_async'),
where the servers run the optimizer, and with kvstore=None from the same start, where this
process does; print `same NAME DIFF` when the parameters agree. Then check that a user's own
optimizer, and a numpy number as a setting, are refused before anything is sent, printing
`refused: MESSAGE`.
"""
import copy

import mxnet as mx
import numpy as np

from gluondist import kvstore

S = mx.lr_scheduler
CASES = [
    ("adam", {"learning_rate": 0.01}, S.FactorScheduler(step=2, factor=0.5)),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3},
     S.MultiFactorScheduler(step=[2, 4], factor=0.5)),
    ("nag", {"learning_rate": 0.05, "momentum": 0.9, "clip_gradient": 1.0},
     S.PolyScheduler(max_update=20, base_lr=0.05, pwr=2)),
    ("rmsprop", {"learning_rate": 0.01}, S.CosineScheduler(max_update=20, base_lr=0.01,
                                                            warmup_steps=2)),
    ("adagrad", {"learning_rate": 0.1}, None),
    ("adadelta", {}, None),
    ("ftml", {"learning_rate": 0.01}, S.FactorScheduler(step=3, factor=0.9, warmup_steps=2)),
    ("signum", {"learning_rate": 0.01, "momentum": 0.9}, None),
    ("lamb", {"learning_rate": 0.01}, None),
    ("adamax", {"learning_rate": 0.01}, None),
    ("ftrl", {"learning_rate": 0.1}, None),
    ("dcasgd", {"learning_rate": 0.1}, None),  # with momentum its update raises (MXNet 1.9.1)
    ("lars", {"learning_rate": 0.1, "momentum": 0.9}, None),
    ("lbsgd", {"learning_rate": 0.1, "momentum": 0.9}, None),
    ("sgd", {"learning_rate": 0.1, "multi_precision": True}, None),
]
BATCH, STEPS = 16, 6
rng = np.random.RandomState(0)
X = mx.nd.array(rng.rand(BATCH * STEPS, 5))
Y = mx.nd.array(rng.rand(BATCH * STEPS, 2))


def train(name, params, scheduler, kind):
    mx.random.seed(0)
    net = mx.gluon.nn.Dense(2, in_units=5)
    net.initialize(mx.init.Xavier())
    settings = dict(params)
    if scheduler is not None:
        # each run its own copy: a scheduler object counts the updates it has seen
        settings["lr_scheduler"] = copy.deepcopy(scheduler)
    trainer = kvstore.make_trainer(net.collect_params(), name, settings, kvstore=kind,
                                   batch_size=BATCH)
    loss = mx.gluon.loss.L2Loss()
    for i in range(STEPS):
        x, y = X[i * BATCH:(i + 1) * BATCH], Y[i * BATCH:(i + 1) * BATCH]
        with mx.autograd.record():
            value = loss(net(x), y)
        value.backward()
        trainer.step(BATCH)
    return np.concatenate([p.data().asnumpy().ravel() for p in net.collect_params().values()])


for name, params, scheduler in CASES:
    served = train(name, params, scheduler, "dist_async")
    local = train(name, params, scheduler, None)
    diff = float(np.max(np.abs(served - local)) / max(np.max(np.abs(local)), 1e-12))
    assert diff < 1e-5, (name, diff)
    print(f"same {name} {diff:.1e}", flush=True)


@mx.optimizer.register
class MyOptimizer(mx.optimizer.SGD):
    pass


for name, params in [("myoptimizer", {}), ("sgd", {"learning_rate": np.float32(0.1)})]:
    try:
        train(name, params, None, "dist_async")
    except ValueError as exc:
        print(f"refused: {exc}", flush=True)
