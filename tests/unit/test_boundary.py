"""Where gluondist reaches below MXNet's public door: every private attribute of MXNet's classes
(read, written, overridden, or named in getattr) and every call into libmxnet, found by reading
gluondist's code, lives in the boundary modules CONTRIBUTING lists (gluondist/_mx.py for
training, the server's and the bootstrap's for their processes)."""
import ast
import os
import re
from pathlib import Path

import mxnet as mx

from conftest import ROOT

BOUNDARY = {"gluondist/_mx.py", "gluondist/launcher/child/server.py",
            "gluondist/launcher/child/bootstrap.py"}
# MXNet's classes the issue names (Trainer, Optimizer, Updater, Parameter, Block, KVStore,
# DataLoader, samplers), the datasets and losses fit reads, NDArray, and mxnet.base
MXNET_SOURCES = ["gluon/trainer.py", "optimizer/optimizer.py", "gluon/parameter.py",
                 "gluon/block.py", "kvstore/kvstore.py", "kvstore/base.py",
                 "gluon/data/dataloader.py", "gluon/data/sampler.py", "gluon/data/dataset.py",
                 "gluon/loss.py", "ndarray/ndarray.py", "base.py", "contrib/amp/amp.py"]
C_SYMBOL = re.compile(r"^(MX|NN)[A-Z]\w*[a-z]\w*$")  # libmxnet's C API (not MXNET_ variables)
PUBLIC = {"MXNetError"}  # mxnet.base's exception, public


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def mxnet_private_names() -> set:
    """Every private name MXNet's sources of those classes define or use."""
    root = Path(mx.__file__).parent
    names = set()
    for source in MXNET_SOURCES:
        for node in ast.walk(ast.parse((root / source).read_text())):
            if isinstance(node, ast.Attribute) and private(node.attr):
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Name) and private(node.id) and source == "base.py":
                names.add(node.id)
    return names


def derives_from_mxnet(cls: ast.ClassDef) -> bool:
    """A class of MXNet's as a base: ``mx.*``, ``_mx.*``, or a Trainer (gluondist's derive from
    MXNet's)."""
    bases = " ".join(ast.unparse(b) for b in cls.bases)
    return "mx." in bases or "Trainer" in bases


def own_attributes(tree) -> dict:
    """For each class of gluondist that does not derive from one of MXNet's, the private
    attributes it sets or defines itself (``self._x = ...``, ``def _x``): its own, whatever
    their name."""
    own = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        if derives_from_mxnet(node):
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


def reaches(path: Path, names: set) -> list:
    """``(line, what)`` for each private MXNet name and C symbol the module uses."""
    tree = ast.parse(path.read_text())
    own = own_attributes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") and \
                node.attr in own.get(id(node), ())
            if C_SYMBOL.match(node.attr) and node.attr not in PUBLIC or node.attr == "_LIB":
                found.append((node.lineno, node.attr))
            elif node.attr in names and not mine:
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
            found.append((node.lineno, node.args[1].value))
        elif isinstance(node, ast.ClassDef) and derives_from_mxnet(node):
            found += [(f.lineno, f"def {f.name}") for f in node.body  # overrides
                      if isinstance(f, ast.FunctionDef) and f.name in names]
    return found


def scan() -> dict:
    names = mxnet_private_names()
    sites = {}
    for path in sorted((ROOT / "gluondist").rglob("*.py")):
        found = reaches(path, names)
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


def test_the_scan_finds_a_private_name_a_c_call_and_an_override(tmp_path):
    """The scan is not blind: a module reaching in each way is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("class T(mx.gluon.Trainer):\n    def _allreduce_grads(self):\n"
                     "        return self._params\n\n"
                     "class Own:\n    def __init__(self):\n        self._params = []\n"
                     "    def n(self):\n        return self._params\n\n"
                     "def f(trainer, lib, loss):\n    lib.MXNDArrayGetData\n"
                     "    getattr(loss, '_axis', 1)\n    return trainer._optimizer\n")
    found = {what for _, what in reaches(probe, mxnet_private_names())}
    assert found == {"def _allreduce_grads", "_params", "MXNDArrayGetData", "_axis",
                     "_optimizer"}
    assert [line for line, what in reaches(probe, mxnet_private_names())
            if what == "_params"] == [3]  # the subclass's, not Own's


def test_contributing_names_the_boundary_modules():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text[text.index("### MXNet's private names"):]
    section = section[:section.index("\n## ") if "\n## " in section else len(section)]
    listed = {f"gluondist/{m}" for m in re.findall(r"`([\w/]+\.py)`", section)
              if not m.startswith("tests/")}
    assert listed == BOUNDARY
    assert os.path.basename(__file__) in section
