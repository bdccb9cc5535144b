"""fit's checks of its arguments, each a one-line ValueError before anything trains: the
optimizer and its settings (fit's own copy), the callbacks, the checkpoint directory, the seed."""
from __future__ import annotations

import copy
import os
import random

import numpy as np

from .._mx import mx
from .callbacks import Callback, Checkpointer
from .checks import last_line

CLIP_KEY = "clip_global_norm"  # our key in optimizer_params: clip gradients by global norm


def check_optimizer(optimizer, optimizer_params):
    """``(optimizer, params, clip)``: fit's own copies of the optimizer (a name, or a copy of
    an instance) and its settings without ``clip_global_norm``, which is returned apart."""
    if optimizer_params is not None and not isinstance(optimizer_params, dict):
        raise ValueError(f"optimizer_params must be a dict such as {{'learning_rate': 0.1}}, "
                         f"not {optimizer_params!r}")
    # fit's own copy: a stateful lr_scheduler (or optimizer) passed again starts alike
    params = copy.deepcopy(dict(optimizer_params or {}))
    clip = params.pop(CLIP_KEY, None)
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float))
                             or not clip > 0):
        raise ValueError(f"optimizer_params[{CLIP_KEY!r}] must be a positive number, not {clip!r}")
    if isinstance(optimizer, mx.optimizer.Optimizer):
        if params:
            raise ValueError(f"optimizer_params {sorted(params)} given with an optimizer "
                             "instance: set them on the instance, or pass the optimizer's name")
        # its parameters (from an earlier Trainer) are not copied: a new Trainer sets them
        return copy.deepcopy(optimizer, {id(optimizer.param_dict): {}}), params, clip
    if not isinstance(optimizer, str):
        raise ValueError(
            f"optimizer must be a name or an mx.optimizer.Optimizer, not {optimizer!r}")
    known = mx.optimizer.Optimizer.opt_registry
    if optimizer.lower() not in known:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of "
                         f"{', '.join(sorted(known))}, or an mx.optimizer.Optimizer")
    try:  # bad keywords and values fail now, with the optimizer's own message
        _dry_run(mx.optimizer.create(optimizer, **copy.deepcopy(params)))
    except (TypeError, ValueError, AttributeError, mx.base.MXNetError) as exc:
        raise ValueError(f"optimizer_params for {optimizer!r}: {last_line(exc)}") from exc
    return optimizer, params, clip


def _dry_run(opt) -> None:
    """One update of a throwaway weight: the optimizer's code meets its settings."""
    weight, grad = mx.nd.ones((2,)), mx.nd.ones((2,))
    opt.update_multi_precision(0, weight, grad, opt.create_state_multi_precision(0, weight))
    weight.wait_to_read()


def check_callbacks(callbacks) -> list:
    callbacks = list(callbacks or [])
    for i, cb in enumerate(callbacks):
        if not isinstance(cb, Callback):
            raise ValueError(f"callbacks[{i}] is a {type(cb).__name__}, not a "
                             "gluondist.Callback; subclass gluondist.Callback")
    return callbacks


def checkpoint_dir_of(checkpoint_dir, callbacks):
    """The directory fit checkpoints to and resumes from: ``checkpoint_dir``, or that of the
    one Checkpointer passed (both given: they must be the same directory)."""
    mine = [cb for cb in callbacks if isinstance(cb, Checkpointer)]
    if len(mine) > 1:
        raise ValueError(f"callbacks holds {len(mine)} Checkpointers; pass one (fit resumes "
                         "from its directory)")
    if mine:
        given = mine[0].directory
        if checkpoint_dir is not None and \
                os.path.realpath(checkpoint_dir) != os.path.realpath(given):
            raise ValueError(f"checkpoint_dir {checkpoint_dir} and the Checkpointer's directory "
                             f"{given} differ; give one of them (fit resumes from the "
                             "Checkpointer's directory)")
        checkpoint_dir = given
    if checkpoint_dir is not None:
        _check_directory(checkpoint_dir)
    return checkpoint_dir


def _check_directory(directory) -> None:
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(f"checkpoint_dir {directory} is a file, not a directory; give the path "
                         "of a directory (it is created if missing)")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"checkpoint_dir {directory}: {exc.strerror}") from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"checkpoint_dir {directory} is not writable")


def seed_all(seed) -> None:
    """MXNet's, numpy's and Python's global RNGs (a Dataset transform may draw from any)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
            not 0 <= seed < 2 ** 31:
        raise ValueError(f"seed must be an integer 0..2**31-1 or None, not {seed!r}")
    mx.random.seed(int(seed))
    np.random.seed(int(seed))
    random.seed(int(seed))
