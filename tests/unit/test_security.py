"""The restricted unpickler: MXNet's optimizers and schedulers load, anything else is
refused by name; names a peer chose cannot forge lines; nothing in gluondist loads a
pickle any other way (the servers in real jobs: e2e/test_security_jobs.py)."""
import ast
import copy
import re
import itertools
import os
import pickle

import mxnet as mx
import numpy as np
import pytest

from gluondist.kv import safepickle
from gluondist.launcher.child import server
from gluondist.kv.safepickle import Refused, check_sendable, load_optimizer

from conftest import ROOT

S = mx.lr_scheduler
SCHEDULERS = [None, S.FactorScheduler(step=10, factor=0.5),
              S.FactorScheduler(step=10, factor=0.5, warmup_steps=3, warmup_mode="constant"),
              S.MultiFactorScheduler(step=[10, 20], factor=0.5),
              S.PolyScheduler(max_update=100, base_lr=0.1, pwr=2),
              S.CosineScheduler(max_update=100, base_lr=0.1, final_lr=0.01, warmup_steps=5)]
# What users set; momentum only where the optimizer takes it.
COMMON = dict(rescale_grad=0.125, clip_gradient=1.0, wd=1e-4, multi_precision=True,
              param_idx2name={0: "dense0_weight", 1: "dense0_bias"}, begin_num_update=3)
MOMENTUM = {"sgd", "nag", "signum", "dcasgd", "lbsgd", "lars"}


def sent(optimizer):
    """What kv.set_optimizer sends for ``optimizer``."""
    return pickle.dumps(optimizer, 0)


def state(obj):
    """An optimizer's or scheduler's attributes, schedulers compared by theirs."""
    return {k: state(v) if isinstance(v, S.LRScheduler) else v
            for k, v in vars(obj).items() if k != "param_dict"}


@pytest.mark.parametrize("name", sorted(mx.optimizer.Optimizer.opt_registry))
def test_every_builtin_optimizer_with_every_scheduler_loads_unchanged(name):
    for scheduler, extra in itertools.product(SCHEDULERS, [{}, {"momentum": 0.9}]):
        if extra and name not in MOMENTUM:
            continue
        optimizer = mx.optimizer.create(name, lr_scheduler=copy.deepcopy(scheduler),
                                        **COMMON, **extra)
        optimizer.set_lr_mult({"dense0_weight": 2.0})
        optimizer.set_wd_mult({"dense0_bias": 0.0})
        loaded = load_optimizer(sent(optimizer))
        assert type(loaded) is type(optimizer)
        assert state(loaded) == state(optimizer)


def test_a_trainers_optimizer_loads():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(4), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(2))
    net.initialize()
    net(mx.nd.ones((2, 3)))
    trainer = mx.gluon.Trainer(net.collect_params(), "adam", {
        "learning_rate": 0.1, "lr_scheduler": S.MultiFactorScheduler([5, 10], 0.1)})
    assert state(load_optimizer(sent(trainer.optimizer))) == state(trainer.optimizer)


def test_the_allowed_set_is_mxnets_classes_and_two_reconstructors():
    classes = safepickle.optimizer_classes()
    assert {module for module, _ in classes} == {
        "mxnet.optimizer.optimizer", "mxnet.optimizer.contrib", "mxnet.lr_scheduler"}
    assert ("mxnet.lr_scheduler", "CosineScheduler") in classes
    assert {name for _, name in safepickle.PLAIN_GLOBALS} == {"_reconstructor", "object"}


class Reduce:
    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


@mx.optimizer.register
class UserOptimizer(mx.optimizer.SGD):
    pass


class UserScheduler(S.LRScheduler):
    def __call__(self, num_update):
        return self.base_lr


@pytest.mark.parametrize("payload, refused", [
    (sent(Reduce(os.system, "true")), "posix.system"),
    (sent(Reduce(eval, "1")), "__builtin__.eval"),
    (pickle.dumps(Reduce(eval, "1"), 4), "builtins.eval"),
    (sent(Reduce(getattr, mx.optimizer.SGD, "mro")), "__builtin__.getattr"),
    (sent(UserOptimizer()), f"{__name__}.UserOptimizer"),
    (sent(mx.optimizer.SGD(lr_scheduler=UserScheduler())), f"{__name__}.UserScheduler"),
    (sent({"lr": 0.1}), "a dict, which is not an optimizer"),
    (sent(S.FactorScheduler(step=2)), "a FactorScheduler, which is not an optimizer"),
    (sent(mx.optimizer.SGD())[:40], "a malformed pickle"),
    (b"not a pickle", "a malformed pickle"),
])
def test_anything_else_is_refused_by_name(payload, refused):
    with pytest.raises(Refused) as caught:
        load_optimizer(payload)
    assert str(caught.value).startswith(f"refused a command that would load {refused}")


def with_state(**state):
    optimizer = mx.optimizer.SGD(lr_scheduler=S.FactorScheduler(step=2))
    for name, value in state.items():
        target = optimizer.lr_scheduler if name.startswith("s_") else optimizer
        setattr(target, name[2:] if name.startswith("s_") else name, value)
    return sent(optimizer)


@pytest.mark.parametrize("payload, refused", [
    # allowed classes where a method or a number belongs: updates that would silently do
    # nothing, or crash later
    (with_state(update_multi_precision=mx.optimizer.Adam),
     "an optimizer whose optimizer.update_multi_precision (in place of a method) is a type"),
    (with_state(lr_scheduler=mx.optimizer.Adam()),
     "an optimizer whose optimizer.lr_scheduler is a Adam"),
    (with_state(rescale_grad=[S.FactorScheduler(step=2)]),
     "an optimizer whose optimizer.rescale_grad[0] is a FactorScheduler"),
    (with_state(s_step=mx.optimizer.SGD()),
     "an optimizer whose optimizer.lr_scheduler.step is a SGD"),
    (with_state(s___call__=mx.optimizer.SGD),
     "an optimizer whose optimizer.lr_scheduler.__call__ (in place of a method) is a type"),
])
def test_an_optimizer_holds_plain_settings_only(payload, refused):
    with pytest.raises(Refused, match=re.escape(f"would load {refused}")):
        load_optimizer(payload)


def test_names_a_peer_chose_cannot_forge_lines_or_reach_a_terminal():
    # protocol 4's STACK_GLOBAL takes the module and name from strings of the peer's choosing
    module, name = "posix\ngluondist server 0: all good\x1b[2K", "system"
    payload = (b"\x80\x04" + b"\x8c" + bytes([len(module)]) + module.encode()
               + b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93.")
    with pytest.raises(Refused) as caught:
        load_optimizer(payload)
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message
    assert message == r"refused a command that would load posix\ngluondist server 0: all " \
                      r"good\x1b[2K.system"


def test_an_unknown_command_is_refused():
    with pytest.raises(Refused, match=r"would load an unknown command \(5\)"):
        server.handle_command(5, sent(mx.optimizer.SGD()))
    assert isinstance(server.handle_command(0, sent(mx.optimizer.SGD())), mx.optimizer.SGD)


@pytest.mark.parametrize("optimizer, message", [
    (UserOptimizer(), f"not {__name__}.UserOptimizer: use a built-in one, or dist_sync"),
    (mx.optimizer.SGD(learning_rate=mx.nd.ones(1).asnumpy()[0]),
     r"not numpy numbers \(optimizer.lr\): give Python numbers"),
    (mx.optimizer.SGD(lr_scheduler=S.FactorScheduler(step=2, base_lr=np.float32(0.5))),
     r"not numpy numbers \(optimizer.lr_scheduler.base_lr, optimizer.lr_scheduler.warmup_fin"
     r"al_lr\): give Python numbers"),
])
def test_a_worker_refuses_what_its_servers_would(optimizer, message):
    with pytest.raises(ValueError, match=message):
        check_sendable(optimizer)
    check_sendable(mx.optimizer.Adam(lr_scheduler=S.FactorScheduler(step=2)))


LOADERS = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


def pickle_loads_in(path):
    """Lines of ``path`` that load a pickle: a loader module's load/loads/Unpickler, or
    ``allow_pickle=True``."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
               for a in n.names if a.name.split(".")[0] in LOADERS}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LOADERS:
            found += [node.lineno for a in node.names if a.name not in ("dumps", "dump")]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr in ("load", "loads", "Unpickler"):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and any(  # the call's line: a keyword has none on 3.8
                k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant)
                                                 and k.value.value is False)
                for k in node.keywords):
            found.append(node.lineno)
    return sorted(found)


def test_nothing_in_gluondist_loads_a_pickle_but_the_restricted_unpickler():
    package = ROOT / "gluondist"
    found = {str(p.relative_to(ROOT)): pickle_loads_in(p) for p in package.rglob("*.py")}
    assert {p: lines for p, lines in found.items() if lines} == {
        "gluondist/kv/safepickle.py": [pickle_loads_in(package / "kv" / "safepickle.py")[0]]}


def test_the_pickle_check_finds_each_form(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import pickle as p\nfrom dill import loads\nimport numpy as np\n"
                     "p.loads(b'')\nnp.load('x', allow_pickle=True)\np.dumps(1)\n")
    assert pickle_loads_in(probe) == [2, 4, 5]






