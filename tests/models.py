"""The model matrix (docs/models.md): every family of MXNet's model zoo at a small input it
takes, an LSTM and a GRU language model over an ``Embedding``, an attention block of Gluon
layers; their data; and the two ways to train one, ``fit`` and a loop of one's own with
``make_trainer`` and ``ShardedBatchSampler``. ``tests/scripts/models_job.py`` trains them as a
job's workers, ``tests/e2e/test_models.py`` the same in one process, and compares."""
import math

import mxnet as mx
import numpy as np
from mxnet.gluon import nn, rnn
from mxnet.gluon.model_zoo import vision

import gluondist
from gluondist import kvstore

# The zoo's families, each at a small square input it takes (AlexNet's smallest; SqueezeNet's,
# DenseNet's and Inception's last pooling has a fixed window: about the size they were made for)
ZOO = {"resnet18_v1": 32, "resnet18_v2": 32, "mobilenet0.25": 32, "mobilenetv2_0.25": 32,
       "vgg11": 32, "vgg11_bn": 32, "alexnet": 63, "squeezenet1.1": 224, "densenet121": 224,
       "inceptionv3": 299}
BATCHNORM = {"resnet18_v1", "resnet18_v2", "mobilenet0.25", "mobilenetv2_0.25", "vgg11_bn",
             "densenet121", "inceptionv3", "convbn"}
VOCAB, STEPS = 40, 6  # the language models': tokens, time steps
USERS, ITEMS = 500, 300  # the recommender's
CLASSES = 10
OPTIMIZER = {"learning_rate": 0.05, "momentum": 0.9}


class LanguageModel(nn.HybridBlock):
    """The next token of each position: Embedding, an LSTM or a GRU, a Dense decoder."""

    def __init__(self, cell, batchnorm=False, sparse=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16, sparse_grad=sparse)
        self.rnn = (rnn.LSTM if cell == "lstm" else rnn.GRU)(24, layout="NTC")
        self.norm = nn.BatchNorm(axis=2) if batchnorm else None  # over samples and steps
        self.out = nn.Dense(VOCAB, flatten=False)

    def hybrid_forward(self, F, x):
        h = self.rnn(self.embed(x))
        return self.out(self.norm(h) if self.norm is not None else h)


class Recommender(nn.HybridBlock):
    """Matrix factorisation: a rating is the dot product of a user's and an item's rows of
    two embeddings with row-sparse gradients (each batch touches few rows)."""

    def __init__(self, users=USERS, items=ITEMS, dim=8):
        super().__init__()
        self.user = nn.Embedding(users, dim, sparse_grad=True)
        self.item = nn.Embedding(items, dim, sparse_grad=True)

    def hybrid_forward(self, F, x):
        user, item = F.split(x, num_outputs=2, axis=1)
        return F.sum(self.user(user.reshape((-1,))) * self.item(item.reshape((-1,))), axis=1)


class Attention(nn.HybridBlock):
    """Scaled dot-product self-attention over a sequence, layer norm, mean over time, a
    classifier."""

    def __init__(self, units=16):
        super().__init__()
        self.units = units
        self.q, self.v = nn.Dense(units, flatten=False), nn.Dense(units, flatten=False)
        # no bias for the keys: softmax over keys ignores it, its gradient is rounding noise
        self.k = nn.Dense(units, flatten=False, use_bias=False)
        self.norm = nn.LayerNorm()
        self.out = nn.Dense(CLASSES)

    def hybrid_forward(self, F, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = F.softmax(F.batch_dot(q, k, transpose_b=True) / math.sqrt(self.units))
        return self.out(F.mean(self.norm(F.batch_dot(weights, v)), axis=1))


def no_dropout(block):
    """Every ``Dropout`` of ``block`` at rate 0, so a run can be compared with another."""
    for child in block._children.values():
        if isinstance(child, nn.Dropout):
            child._rate = 0.0
        no_dropout(child)
    return block


def build(name):
    """A new, uninitialised, hybridized net."""
    if name in ZOO:
        net = no_dropout(vision.get_model(name, classes=CLASSES))
    elif name in ("lstm", "gru"):
        net = LanguageModel(name)
    elif name == "lstmbn":
        net = LanguageModel("lstm", batchnorm=True)
    elif name == "lstmsparse":
        net = LanguageModel("lstm", sparse=True)
    elif name == "recommender":
        net = Recommender()
    elif name == "mlpbn":
        net = nn.HybridSequential()
        net.add(nn.Dense(32, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                nn.Dense(CLASSES))
    elif name == "attention":
        net = Attention()
    elif name in ("conv", "convbn"):  # a small conv net, for the modes (fit_job.py); average
        # pooling: a max's argmax may flip on a last-bit difference (test_elastic_netns.py)
        net = nn.HybridSequential()
        if name == "convbn":  # no bias before BatchNorm: its gradient is rounding noise
            net.add(nn.Conv2D(8, 3, padding=1, use_bias=False), nn.BatchNorm())
        else:
            net.add(nn.Conv2D(8, 3, padding=1))
        net.add(nn.Activation("relu"), nn.AvgPool2D(2), nn.Conv2D(16, 3), nn.Activation("relu"),
                nn.Flatten(), nn.Dense(CLASSES))
    else:
        raise ValueError(f"no model {name!r}")
    net.hybridize()
    return net


def data(name, samples):
    """``samples`` inputs and labels for ``name``, the same in every process."""
    rs = np.random.RandomState(sum(map(ord, name)))
    if name == "recommender":  # (user, item) pairs and their ratings, 0 to 5
        pairs = np.stack([rs.randint(0, USERS, samples), rs.randint(0, ITEMS, samples)], 1)
        return pairs.astype(np.float32), (rs.rand(samples) * 5).astype(np.float32)
    if name in ("lstm", "gru", "lstmbn", "lstmsparse"):
        tokens = rs.randint(0, VOCAB, (samples, STEPS + 1))
        return tokens[:, :-1].astype(np.float32), tokens[:, 1:].astype(np.float32)
    if name == "attention":
        shape = (samples, STEPS, 8)
    else:
        side = ZOO.get(name, 12)
        shape = (samples, 3, side, side)
    return rs.rand(*shape).astype(np.float32), rs.randint(0, CLASSES, samples).astype(np.float32)


def params(net, ctx=None):
    """Every array of ``net`` by its structural name (the same in every process), on ``ctx``
    (default: its first device)."""
    return {k: p.data(ctx or p.list_ctx()[0]).asnumpy()
            for k, p in net._collect_params_with_prefix().items()}


def train_fit(name, batch, steps, ctx=1, **kw):
    """``name`` trained by ``fit`` for ``steps`` global batches (``batch`` a worker, on ``ctx``
    devices); returns the net."""
    net = build(name)
    X, y = data(name, batch * kvstore.num_workers() * steps)
    gluondist.fit(net, (X, y), epochs=1, batch_size=batch, ctx=ctx, seed=5, progress=False,
                  optimizer_params=dict(OPTIMIZER), **kw)
    return net


def train_loop(name, batch, steps, ctx=1):
    """``name`` trained by a loop of one's own: initialise, one forward pass outside training
    (which leaves convolution weights in oneDNN's layout on MXNet's CPU builds), make_trainer,
    ShardedBatchSampler's share of each global batch split over ``ctx`` devices."""
    ctxs = [mx.cpu(i) for i in range(ctx)]
    net = build(name)
    mx.random.seed(5)
    net.initialize(mx.init.Xavier(), ctx=ctxs)
    X, y = data(name, batch * kvstore.num_workers() * steps)
    net(mx.nd.array(X[:1], ctx=ctxs[0]))
    trainer = kvstore.make_trainer(net.collect_params(), "sgd", dict(OPTIMIZER),
                                   num_contexts=len(ctxs))
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    sampler = kvstore.ShardedBatchSampler(len(X), batch, kvstore.num_workers(), kvstore.rank(),
                                          seed=5)
    for indices, count in sampler.batches():
        xs = mx.gluon.utils.split_and_load(X[indices], ctxs)
        ys = mx.gluon.utils.split_and_load(y[indices], ctxs)
        with mx.autograd.record():
            losses = [loss(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(count)
    return net


def train_sync(name, batch, steps, dtype="float64", sync=True):
    """``name`` (with BatchNorm) as :func:`train_loop` trains it on one device, in ``dtype``,
    its BatchNorm layers synchronised over the job (``sync``: gluondist.sync_batchnorm)."""
    net = build(name)
    net.cast(dtype)
    mx.random.seed(5)
    net.initialize(mx.init.Xavier())
    X, y = data(name, batch * kvstore.num_workers() * steps)
    X, y = X.astype(dtype), y.astype(dtype)
    net(mx.nd.array(X[:1], dtype=dtype))
    if sync:
        gluondist.sync_batchnorm(net)
    trainer = kvstore.make_trainer(net.collect_params(), "sgd", dict(OPTIMIZER))
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    sampler = kvstore.ShardedBatchSampler(len(X), batch, kvstore.num_workers(), kvstore.rank(),
                                          seed=5)
    for indices, count in sampler.batches():
        with mx.autograd.record():
            losses = loss(net(mx.nd.array(X[indices], dtype=dtype)),
                          mx.nd.array(y[indices], dtype=dtype))
        losses.backward()
        trainer.step(count)
    return net
