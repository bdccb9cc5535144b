"""fit's arguments, declared once. :class:`FitArgs` holds each one with its type, its default,
a line saying what it means and its check; making a FitArgs runs every check, so a bad value
fails in one line naming the argument before anything trains. fit's signature is written out
for IDEs and ``help()`` and tested against this declaration, and the argument table of
docs/fit.md is :func:`markdown_table` (tests/unit/test_fit_args.py checks both)."""
from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Callable, Dict, Optional, Sequence, Union

import numpy as np

from .. import parallel
from .._mx import mx
from ..kv import compression as cmp
from ..kv.kinds import KINDS
from ..kv.sampling import SEEDS
from ..parallel import Contexts, contexts
from . import metrics as mtr
from .arrays import class_weight_table
from .callbacks import Callback
from .checks import check_count
from .data import check_kind
from .objective import check_float32

DEFAULT_BATCH_SIZE = 32  # per worker, when neither the call nor a DataLoader gives one (Keras')
SEED_RANGE = f"0..2**{SEEDS.bit_length() - 1}-1"  # how messages and docs write the seeds
CLIP_KEY = "clip_global_norm"  # our key in optimizer_params: clip gradients by global norm

# The types of the arguments that take several kinds of value.
Data = Union[tuple, mx.gluon.data.Dataset, mx.gluon.data.DataLoader]
Losses = Union[Callable, Sequence[Optional[Callable]]]
Metrics = Union[None, str, mx.metric.EvalMetric, Sequence, Dict[int, object]]
PathLike = Union[str, os.PathLike]
Check = Callable[[object, str], None]  # (value, argument name): raises ValueError


def _arg(default, doc: str, check: Check):
    """A field of FitArgs: its default (MISSING: none), its meaning, its check."""
    return field(default=default, metadata={"doc": doc, "check": check})


def _optional(check: Check) -> Check:
    def check_unless_none(value, name):
        if value is not None:
            check(value, name)
    return check_unless_none


def _count(least: int) -> Check:
    return lambda value, name: check_count(value, name, least)


def _flag(value, name) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, not {value!r}")


def _flag_or_none(value, name) -> None:
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True, False or None (fit decides), not {value!r}")


def _net(net, name) -> None:
    if not isinstance(net, mx.gluon.Block):
        raise ValueError(f"{name} must be a gluon.Block (such as gluon.nn.HybridSequential), "
                         f"not {type(net).__name__}")
    check_float32(net)


def _loss(loss, name) -> None:
    losses = loss if isinstance(loss, (list, tuple)) else [loss]
    if not all(fn is None or callable(fn) for fn in losses):
        raise ValueError(f"{name} must be a gluon.loss.Loss (or a function (output, label) -> "
                         "loss per sample), a list of them with one per output, or None, not "
                         f"{loss!r}")


def _optimizer(optimizer, name) -> None:
    if isinstance(optimizer, mx.optimizer.Optimizer):
        return
    if not isinstance(optimizer, str):
        raise ValueError(f"{name} must be a name or an mx.optimizer.Optimizer, not {optimizer!r}")
    known = mx.optimizer.Optimizer.opt_registry
    if optimizer.lower() not in known:
        raise ValueError(f"unknown {name} {optimizer!r}; use one of {', '.join(sorted(known))}, "
                         "or an mx.optimizer.Optimizer")


def _optimizer_params(params, name) -> None:
    if not isinstance(params, dict):
        raise ValueError(f"{name} must be a dict such as {{'learning_rate': 0.1}}, not {params!r}")
    clip = params.get(CLIP_KEY)
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float))
                             or not clip > 0):
        raise ValueError(f"{name}[{CLIP_KEY!r}] must be a positive number, not {clip!r}")


def _ctx(ctx, name) -> None:
    try:
        contexts(ctx)
    except TypeError as exc:
        raise ValueError(f"{name} must be None, an int, a string such as 'gpu:0,gpu:1', a "
                         f"Context or a list of them, not {ctx!r}") from exc
    except ValueError as exc:  # a device it cannot read: the message says which, we say where
        raise ValueError(f"{name}: {exc}") from exc


def _kvstore(kind, name) -> None:
    if kind is not None and kind != "auto" and kind not in KINDS:
        raise ValueError(f"unknown {name} kind {kind!r}; use 'auto', None or one of: "
                         f"{', '.join(KINDS)}")


def _metrics(metrics, name) -> None:
    if not (isinstance(metrics, str) and metrics == "auto"):
        for each in metrics.values() if isinstance(metrics, dict) else [metrics]:
            try:
                mtr.create(each)  # names an unknown or repeated metric
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from exc


def _callbacks(callbacks, name) -> None:
    if not isinstance(callbacks, (list, tuple)):
        raise ValueError(f"{name} must be a list of gluondist.Callback, not "
                         f"{type(callbacks).__name__}")
    for i, cb in enumerate(callbacks):
        if not isinstance(cb, Callback):
            raise ValueError(f"{name}[{i}] is a {type(cb).__name__}, not a "
                             "gluondist.Callback; subclass gluondist.Callback")


def _path(path, name) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{name} must be a path (a str or a pathlib.Path), not {path!r}")


def _seed(seed, name) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
            not 0 <= seed < SEEDS:
        raise ValueError(f"{name} must be an integer {SEED_RANGE} or None, not {seed!r}")


def _loss_weights(weights, name) -> None:
    try:
        ok = not isinstance(weights, str) and all(np.isfinite(float(w)) for w in weights)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be numbers, one per output, not {weights!r}")


def _parallel(kind, name) -> None:
    parallel.mode(kind, name)  # a registered mode (gluondist.parallel.register_mode)


def _stages(cuts, name) -> None:
    if isinstance(cuts, (str, bytes)) or not isinstance(cuts, (list, tuple)) or \
            not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in cuts):
        raise ValueError(f"{name} must be a list of child indices where stages begin, such as "
                         f"[3, 6], not {cuts!r}")


@dataclass(frozen=True, eq=False)
class FitArgs:
    """The arguments of :func:`gluondist.fit`, as the caller gave them, each checked alone
    when this is made (what only holds of them together, and of the data, fit checks next)."""

    net: mx.gluon.Block = _arg(
        MISSING, "The Gluon model to train (float32); initialised (Xavier) on every device "
                 "unless it already is.", _net)
    train_data: Data = _arg(
        MISSING, "`(X, y)` or `(X, y, sample_weight)` arrays (tuples of arrays for several "
                 "inputs or outputs), a `gluon.data.Dataset` or a `DataLoader`.",
        lambda data, name: check_kind(data, name))
    loss: Optional[Losses] = _arg(
        None, "A Gluon loss, or a list with one per output; None: softmax cross-entropy.", _loss)
    optimizer: Union[str, mx.optimizer.Optimizer] = _arg(
        "sgd", "An MXNet optimizer's name, or an `mx.optimizer.Optimizer` (fit trains a copy).",
        _optimizer)
    optimizer_params: Optional[dict] = _arg(
        None, f"The optimizer's settings (fit trains with a copy), plus `{CLIP_KEY}`: clip the "
              "global batch's mean gradient to that 2-norm (under `dist_async`, each "
              "worker's own).", _optional(_optimizer_params))
    epochs: int = _arg(
        1, "Epochs to train; a resumed run counts those it trained before; 0 trains nothing "
           "(the History is empty).", _count(0))
    batch_size: Optional[int] = _arg(
        None, "Samples per worker and step, split across the devices; None: the DataLoader's, "
              f"else {DEFAULT_BATCH_SIZE}, at most each worker's share of the samples. A "
              "resumed run keeps its first start's global batch (batch_size x workers), "
              "whatever the workers now ([Elastic jobs](elastic.md)).",
        _optional(_count(1)))
    ctx: Contexts = _arg(
        None, "The devices: None for every GPU (else the CPU), an int n for n devices, "
              "`'gpu:0,gpu:1'` or a list of contexts.", _ctx)
    kvstore: Optional[str] = _arg(
        "auto", "`'auto'`: none on one device, `'device'` on several, in a job the launcher's "
                "`--kvstore`; or a kind (`'device'`, `'dist_sync'`, ...); None: none.", _kvstore)
    val_data: Optional[Data] = _arg(
        None, "Validation data, any kind `train_data` takes, scored after each epoch into "
              "the `val_` keys.", _optional(lambda data, name: check_kind(data, name)))
    metrics: Metrics = _arg(
        "auto", "`'auto'`: accuracy for outputs trained with softmax cross-entropy; names "
                "(`accuracy`, `mse`, `mae`, `rmse`, `ce`), `mx.metric` objects, a list, or "
                "`{output: metrics}`.", _metrics)
    callbacks: Optional[Sequence[Callback]] = _arg(
        None, "`gluondist.Callback` instances; one of fit's own kinds (`ProgressBar`, "
              "`EpochLogger`, `History`, `Checkpointer`) replaces fit's.", _optional(_callbacks))
    checkpoint_dir: Optional[PathLike] = _arg(
        None, "Worker 0 writes a checkpoint there after every epoch (and every "
              "`checkpoint_every` steps), in the background: a directory every worker sees.",
        _optional(_path))
    resume: bool = _arg(
        True, "Continue after the newest complete checkpoint in `checkpoint_dir`; False: start "
              "a fresh run there.", _flag)
    progress: Optional[bool] = _arg(
        None, "True: a progress bar; False: neither bar nor line; None: a bar in a terminal "
              "or notebook, else a line per epoch (worker 0's, on stderr unless logging shows "
              "it).", _flag_or_none)
    seed: Optional[int] = _arg(
        None, f"An integer {SEED_RANGE} that makes the run reproducible; None: a new one (in a "
              "job, the same on every worker).", _optional(_seed))
    terminate_on_nan: bool = _arg(
        True, "A NaN or infinite training loss (or parameter, checked after each epoch and "
              "at each step checkpoint) raises FloatingPointError.", _flag)
    accumulate: int = _arg(
        1, "k: one update every k batches, with the sum of their gradients (as a batch k times "
           "larger).", _count(1))
    loss_weights: Optional[Sequence[float]] = _arg(
        None, "Several outputs: the weight of each output's loss in the total `loss`.",
        _optional(_loss_weights))
    class_weight: Optional[Dict[int, float]] = _arg(
        None, "`{class: weight}` for every class 0..K-1 of the first output: each training "
              "sample's loss is weighed by its class's.",
        _optional(lambda table, name: class_weight_table(table)))
    parallel: str = _arg(
        "data", "`'data'`: each device holds a copy of the net and takes a part of the batch; "
                "`'pipeline'`: a `Sequential` split into one stage per device (see "
                "[Pipeline parallelism](pipeline.md)).", _parallel)
    micro_batches: int = _arg(
        1, "`parallel='pipeline'`: the parts each batch is cut into, run through the stages "
           "in turn (at most the batch size).", _count(1))
    stages: Optional[Sequence[int]] = _arg(
        None, "`parallel='pipeline'`: the child indices where stages 2.. begin (`[3, 6]`); "
              "None balances the stages by parameter count.", _optional(_stages))
    compression: Union[None, str, dict] = _arg(
        None, "Gradients on the wire of a `dist_sync` job: None (float32), `'fp16'` (half the "
              "bytes both ways), `'2bit'` or `{'type': '2bit', 'threshold': t}` (MXNet's, "
              "pushes 16x smaller); see [Compression](fit.md#compression).",
        lambda value, name: cmp.parse(value, name))
    checkpoint_every: Optional[int] = _arg(
        None, "N: also checkpoint every N optimizer steps, counted over the run, so that a "
              "resume continues mid-epoch and an elastic job resizes at the next such "
              "checkpoint (needs `checkpoint_dir`; not under `dist_async`); see "
              "[Long jobs](long-jobs.md).", _optional(_count(1)))

    sync_batchnorm: bool = _arg(
        False, "`True`: every `BatchNorm` of the net normalises with the statistics of the "
               "whole global batch, summed over the job's workers (one device each), so the "
               "job computes what one process with the global batch does; see "
               "[Models](models.md#batchnorm-over-the-whole-job).", _flag)

    def __post_init__(self):
        for f in fields(self):
            f.metadata["check"](getattr(self, f.name), f.name)


def markdown_table() -> str:
    """The argument table of docs/fit.md: one row per argument, its default and meaning."""
    rows = ["| Argument | Default | Meaning |", "| --- | --- | --- |"]
    for f in fields(FitArgs):
        default = "required" if f.default is MISSING else f"`{f.default!r}`"
        rows.append(f"| `{f.name}` | {default} | {f.metadata['doc']} |")
    return "\n".join(rows)
