"""Where gluondist reaches below MXNet's public door: every private name of MXNet's (an attribute
read, written, overridden, named in getattr or attrgetter, imported from an MXNet module) and
every call into libmxnet, found by reading gluondist's code, lives in the boundary modules
CONTRIBUTING lists (gluondist/_mx.py for training, the server's and the bootstrap's for their
processes)."""
import ast
import os
import re
import warnings
from functools import lru_cache
from pathlib import Path

import mxnet as mx

from conftest import ROOT

BOUNDARY = {"gluondist/_mx.py", "gluondist/launcher/child/server.py",
            "gluondist/launcher/child/bootstrap.py"}
C_SYMBOL = re.compile(r"^(MX|NN)[A-Z]\w*[a-z]\w*$")  # libmxnet's C API (not MXNET_ variables)
C_PREFIX = {"MX", "NN"}  # a symbol's name built at run time ("MX" + "NDArrayWaitAll")
LOOKUPS = ("getattr", "setattr", "hasattr", "delattr", "attrgetter")


def private(name) -> bool:
    return isinstance(name, str) and name.startswith("_") and not name.startswith("__")


# The classes the issue names: their private names are refused even inside a string (a name
# kept in a constant, eval, __dict__.get, object.__getattribute__, type(...) with a dict)
CORE = ("gluon/trainer.py", "optimizer/optimizer.py", "gluon/parameter.py", "gluon/block.py",
        "kvstore/kvstore.py", "kvstore/base.py", "gluon/data/dataloader.py",
        "gluon/data/sampler.py", "ndarray/ndarray.py", "base.py")
# mxnet's public names that look like C symbols
PUBLIC = {n for module in (mx, mx.recordio, mx.io, mx.base) for n in dir(module)
          if not private(n)}


@lru_cache()
def mxnet_private_names(sources=None) -> frozenset:
    """Every private name MXNet's Python defines, uses or imports, in any of its modules (or
    in ``sources``), and its private modules."""
    root = Path(mx.__file__).parent
    names = {part.split(".")[0] for path in root.rglob("*") for part in
             path.relative_to(root).parts if private(part)} if sources is None else set()
    for path in ([root / s for s in sources] if sources else root.rglob("*.py")):
        try:
            with warnings.catch_warnings():  # MXNet's invalid escapes in docstrings
                warnings.simplefilter("ignore")
                tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and private(node.attr):
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Name) and private(node.id) and \
                    isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {p for a in node.names for p in a.name.split(".") if private(p)}
    return frozenset(names)


def private_tokens(text: str) -> set:
    """The private names a string holds: alone, or after a dot (``"trainer._optimizer"``)."""
    return set(re.findall(r"(?:^|(?<=[^\w]))_[A-Za-z]\w*", text))


def docstrings(tree) -> set:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def mxnet_bound(tree) -> set:
    """The module's names that stand for MXNet: its imports from mxnet (and gluondist's _mx),
    and module-level names assigned from those (``Base = mx.gluon.Trainer``)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] == "mxnet"}
        elif isinstance(node, ast.ImportFrom) and ((node.module or "").split(".")[0] ==
                                                   "mxnet" or (node.module or "") == "_mx"
                                                   or any(a.name == "_mx" for a in node.names)):
            bound |= {a.asname or a.name for a in node.names}
    for node in tree.body:
        if isinstance(node, ast.Assign) and roots(node.value) & bound:
            bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return bound


def roots(expr) -> set:
    """The names an expression starts from."""
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def derives_from_mxnet(cls: ast.ClassDef, bound: set) -> bool:
    """A class of MXNet's as a base: named through the module's MXNet names, or a Trainer or
    Block (gluondist's own derive from MXNet's)."""
    return any(roots(b) & bound or re.search(r"(Trainer|Block)\b", " ".join(words(b)))
               for b in cls.bases)


def words(expr) -> list:
    """The names and attribute names in an expression (``ast.unparse`` is Python 3.9's)."""
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(expr)
            if isinstance(n, (ast.Name, ast.Attribute))]


def own_attributes(tree, bound: set) -> dict:
    """For each class of gluondist that does not derive from one of MXNet's, the private
    attributes it sets or defines itself (``self._x = ...``, ``def _x``): its own, whatever
    their name."""
    own = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or derives_from_mxnet(node, bound):
            continue
        names = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and \
                    sub.value.id == "self" and isinstance(sub.ctx, ast.Store):
                names.add(sub.attr)
            if isinstance(sub, ast.Assign) and isinstance(sub.targets[0], ast.Name):
                names.add(sub.targets[0].id)  # class attributes (__slots__-style constants)
        for sub in ast.walk(node):
            own[id(sub)] = names
    return own


def strings(expr) -> list:
    """The string constants in an expression (a name built as ``"_" + "params"`` included)."""
    return [n.value for n in ast.walk(expr) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def lookup(call: ast.Call):
    """The name argument of getattr, setattr, hasattr, delattr or attrgetter, or None."""
    func = call.func.attr if isinstance(call.func, ast.Attribute) else \
        getattr(call.func, "id", None)
    if func == "attrgetter" and call.args:
        return call.args[0]
    return call.args[1] if func in LOOKUPS and len(call.args) > 1 else None


def reaches(path: Path, names=None) -> list:
    """``(line, what)`` for each private MXNet name and C symbol the module uses."""
    names = mxnet_private_names() if names is None else names
    tree = ast.parse(path.read_text())
    bound = mxnet_bound(tree)
    own = own_attributes(tree, bound)
    found, docs, core = [], docstrings(tree), mxnet_private_names(CORE)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in docs:
            found += [(node.lineno, t) for t in private_tokens(node.value) & core]
            if node.value in C_PREFIX:
                found.append((node.lineno, node.value))
        if isinstance(node, ast.Import):
            found += [(node.lineno, p) for a in node.names if a.name.startswith("mxnet")
                      for p in a.name.split(".") if private(p)]
        if isinstance(node, ast.Attribute):
            mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") and \
                node.attr in own.get(id(node), ())
            if C_SYMBOL.match(node.attr) and node.attr not in PUBLIC or node.attr == "_LIB":
                found.append((node.lineno, node.attr))
            elif node.attr in names and not mine:
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mxnet"):
            found += [(node.lineno, p) for p in [*(node.module or "").split("."),
                                                 *(a.name for a in node.names)] if private(p)]
        elif isinstance(node, ast.Call) and lookup(node) is not None:
            arg = lookup(node)  # the name looked up: a constant, or built at run time
            found += [(node.lineno, s) for s in strings(arg)
                      if s in names or private(s) and not isinstance(arg, ast.Constant)]
        elif isinstance(node, ast.Subscript) and (
                isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "vars"
                or isinstance(node.value, ast.Attribute) and node.value.attr == "__dict__"):
            found += [(node.lineno, s) for s in strings(node.slice) if s in names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                C_SYMBOL.match(node.value) and node.value not in PUBLIC:
            found.append((node.lineno, node.value))  # getattr(lib, "MX...")
        elif isinstance(node, ast.ClassDef) and derives_from_mxnet(node, bound):
            found += [(f.lineno, f"def {f.name}") for f in node.body  # overrides
                      if isinstance(f, ast.FunctionDef) and f.name in names]
    return found


def scan() -> dict:
    sites = {}
    for path in sorted((ROOT / "gluondist").rglob("*.py")):
        found = reaches(path)
        if found:
            sites[str(path.relative_to(ROOT))] = found
    return sites


def test_every_private_name_and_c_call_of_mxnet_is_in_a_boundary_module():
    sites = scan()
    outside = {m: s for m, s in sites.items() if m not in BOUNDARY}
    assert outside == {}, "MXNet's private names outside the boundary modules: " + "; ".join(
        f"{m}:{line} {what}" for m, s in outside.items() for line, what in s)
    # and the boundary is where they are, each module with some (the list, printed with -s)
    assert set(sites) == BOUNDARY
    for module, found in sites.items():
        print(module, sorted({what for _, what in found}))


PROBE = '''
import operator
import mxnet as mx
from mxnet.gluon import nn
from mxnet.gluon.block import _flatten
from mxnet.base import _LIB as lib

Base = mx.gluon.Trainer


class T(Base):
    def _allreduce_grads(self):
        return self._params


class B(nn.HybridBlock):
    def _get_graph(self, *args):
        return None


class Own:
    def __init__(self):
        self._params = []

    def n(self):
        return self._params


import mxnet._ctypes.ndarray
_NAME = "_optimizer"


def g(trainer, lib):
    trainer.__dict__.get("_kvstore")
    object.__getattribute__(trainer, "_scale")
    eval("trainer._contexts")
    getattr(lib, "MX" + "KVStoreFree")
    return mx._ctypes


def f(trainer, loss, layer, name):
    getattr(lib, "MXNDArrayWaitAll")()
    getattr(loss, "_axis", 1)
    getattr(trainer, "_" + "scale")
    getattr(trainer, f"_{name}")
    operator.attrgetter("_updaters")(trainer)
    vars(trainer)["_kvstore"]
    layer._hidden_size
    return trainer._optimizer
'''


def test_the_scan_finds_each_way_of_reaching_in(tmp_path):
    """The scan is not blind: a module reaching in each way is caught, and a class of its own
    keeps its own names."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    found = reaches(probe)
    # a name built at run time ("_" + "scale", f"_{name}") is caught by its private prefix
    assert {what for _, what in found} == {
        "_flatten", "_LIB", "def _allreduce_grads", "_params", "def _get_graph",
        "MXNDArrayWaitAll", "_axis", "_", "_updaters", "_kvstore", "_hidden_size",
        "_optimizer", "_ctypes", "_scale", "_contexts", "MX"}
    assert sum(what == "_" for _, what in found) == 2
    lines = PROBE.splitlines()  # T's self._params, not Own's
    assert [lines[line - 1].strip() for line, what in found if what == "_params"] == \
        ["return self._params"]
    assert [line for line, what in found if what == "_params"][0] < \
        PROBE[:PROBE.index("class Own")].count("\n") + 1


def test_contributing_names_the_boundary_modules():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text[text.index("### MXNet's private names"):]
    section = section[:section.index("\n## ") if "\n## " in section else len(section)]
    listed = {f"gluondist/{m}" for m in re.findall(r"`([\w/]+\.py)`", section)
              if not m.startswith("tests/")}
    assert listed == BOUNDARY
    assert os.path.basename(__file__) in section
