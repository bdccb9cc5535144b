"""fit's arguments are declared once, in FitArgs: fit's signature, the argument table of
docs/fit.md and the checks follow that declaration, and a test here fails when one drifts."""
import inspect
import math
from dataclasses import MISSING, fields

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import Callback
from gluondist.kv.sampling import SEEDS, derive_seed
from gluondist.training.arguments import DEFAULT_BATCH_SIZE, FitArgs, markdown_table
from conftest import assert_same_params, mlp, params_of, ROOT

# One value of the wrong kind for every argument, and what its one-line error says.
BAD = {
    "net": ("model.params", r"^net must be a gluon.Block .*not str$"),
    "train_data": ((np.zeros((4, 2)),),
                   r"^train_data must be an \(X, y\) tuple .*not a tuple of 1$"),
    "loss": ("mse", r"^loss must be a gluon.loss.Loss .*not 'mse'$"),
    "optimizer": (0.1, r"^optimizer must be a name or an mx.optimizer.Optimizer, not 0.1$"),
    "optimizer_params": ([0.1], r"^optimizer_params must be a dict"),
    "epochs": (1.5, r"^epochs must be a non-negative integer, not 1.5$"),
    "batch_size": (True, r"^batch_size must be a positive integer, not True$"),
    "ctx": (1.5, r"^ctx must be None, an int, .*not 1.5$"),
    "kvstore": ("dist", r"^unknown kvstore kind 'dist'; use 'auto', None or one of: local"),
    "val_data": ("val.csv", r"^val_data must be an \(X, y\) tuple .*not str$"),
    "metrics": ("acuracy", r"^metrics: unknown metric 'acuracy'"),
    "callbacks": (gluondist.EarlyStopping(), r"^callbacks must be a list of gluondist.Callback, "
                                             r"not EarlyStopping$"),
    "checkpoint_dir": (3, r"^checkpoint_dir must be a path \(a str or a pathlib.Path\), not 3$"),
    "resume": ("no", r"^resume must be True or False, not 'no'$"),
    "progress": (0, r"^progress must be True, False or None \(fit decides\), not 0$"),
    "seed": (SEEDS, rf"^seed must be an integer 0..2\*\*31-1 or None, not {SEEDS}$"),
    "terminate_on_nan": (None, r"^terminate_on_nan must be True or False, not None$"),
    "accumulate": (0, r"^accumulate must be a positive integer, not 0$"),
    "loss_weights": ([1.0, "half"], r"^loss_weights must be numbers, one per output"),
    "class_weight": ({1: 1.0}, r"^class_weight must be a dict from every class index 0..K-1"),
    "parallel": ("model", r"^parallel must be 'data' \(each device a copy of the net\) or "
                          r"'pipeline' .*not 'model'$"),
    "micro_batches": (0, r"^micro_batches must be a positive integer, not 0$"),
    "stages": ("3", r"^stages must be a list of child indices where stages begin, such as "
                    r"\[3, 6\], not '3'$"),
    "compression": ("3bit", r"^compression must be None, 'fp16', '2bit' or \{'type': '2bit', "
                            r"'threshold': T\}, not '3bit'$"),
    "checkpoint_every": (0, r"^checkpoint_every must be a positive integer, not 0$"),
    "sync_batchnorm": ("yes", r"^sync_batchnorm must be True or False, not 'yes'$"),
}


def test_fits_signature_is_the_declaration():
    """Names, order, defaults and types: fit's written-out signature is FitArgs' fields."""
    params = list(inspect.signature(gluondist.fit).parameters.values())
    assert [(p.name, p.default, p.annotation, p.kind) for p in params] == [
        (f.name, inspect.Parameter.empty if f.default is MISSING else f.default, f.type,
         inspect.Parameter.POSITIONAL_OR_KEYWORD) for f in fields(FitArgs)]


def test_the_docs_argument_table_is_the_declarations():
    table = markdown_table()
    assert table.count("\n") == len(fields(FitArgs)) + 1  # a header, a rule, a row each
    assert table in (ROOT / "docs" / "fit.md").read_text(), (
        "docs/fit.md's argument table differs from FitArgs; paste the output of "
        "python -c 'from gluondist.training.arguments import markdown_table as t; print(t())'")


def test_every_argument_has_a_one_line_meaning_and_a_check():
    for f in fields(FitArgs):
        doc = f.metadata["doc"]
        assert doc.endswith(".") and "\n" not in doc and "|" not in doc, f.name
        assert callable(f.metadata["check"]), f.name


def test_fit_hands_every_argument_to_fitargs_by_name():
    """fit passes each of its arguments on by name, so a new one cannot be left out."""
    import ast
    import inspect as ins
    from gluondist.training import loop
    call = next(n for n in ast.walk(ast.parse(ins.getsource(loop.fit)))
                if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "FitArgs")
    assert [(k.arg, k.value.id) for k in call.keywords] == \
        [(f.name, f.name) for f in fields(FitArgs)]


@pytest.mark.parametrize("name", [f.name for f in fields(FitArgs)])
def test_each_argument_of_the_wrong_kind_fails_in_one_line_naming_it(small, name):
    assert set(BAD) == {f.name for f in fields(FitArgs)}  # a new argument needs a case here
    net = mlp(8)
    net.initialize()
    net(mx.nd.ones((1, 64)))
    before = params_of(net)
    bad, message = BAD[name]
    args = dict(net=net, train_data=small[0], epochs=1)
    args[name] = bad
    with pytest.raises(ValueError, match=message):
        gluondist.fit(**args)
    assert_same_params(net, before)  # refused before training


@pytest.mark.parametrize("name,bad,message", [
    ("ctx", "tpu:0", r"^ctx: cannot read device 'tpu:0'"),
    ("metrics", ["acc", "acc"], r"^metrics: metric name\(s\) accuracy appear twice")])
def test_a_value_of_the_right_kind_that_is_wrong_names_its_argument_too(small, name, bad,
                                                                       message):
    with pytest.raises(ValueError, match=message):
        gluondist.fit(mlp(8), small[0], epochs=1, **{name: bad})


def test_the_seed_bound_is_one_for_checks_derived_seeds_and_drawn_seeds(small):
    X, y = small[0]
    FitArgs(mlp(8), (X, y), seed=0)
    FitArgs(mlp(8), (X, y), seed=SEEDS - 1)
    for bad in (-1, SEEDS):
        with pytest.raises(ValueError, match="0..2"):
            FitArgs(mlp(8), (X, y), seed=bad)
    derived = [derive_seed(SEEDS - 1, stream, epoch) for stream in (0, 1) for epoch in range(50)]
    assert max(derived) < SEEDS and len(set(derived)) == 100
    seeds = []

    class Seed(Callback):
        def on_train_begin(self, run):
            seeds.append(run.seed)
    for _ in range(3):  # no seed given: one is drawn, within the bound
        gluondist.fit(mlp(8), (X[:40], y[:40]), epochs=0, callbacks=[Seed()], progress=False)
    assert all(0 <= s < SEEDS for s in seeds) and len(set(seeds)) == 3


def test_the_default_batch_size_is_the_declared_one_at_most_the_data(small):
    X, y = small[0]
    steps = []

    class Steps(Callback):
        def on_train_begin(self, run):
            steps.append(run.steps)
    for n in (len(X), DEFAULT_BATCH_SIZE - 4):
        gluondist.fit(mlp(8), (X[:n], y[:n]), epochs=0, callbacks=[Steps()], progress=False)
    assert steps == [math.ceil(len(X) / DEFAULT_BATCH_SIZE), 1]
