"""The package's shape, read from its source: no import cycle in the launcher or the whole
package, the launcher's children import only their own layer, and the launcher no training
code (the imports in a fresh interpreter: launcher/test_import_layers.py)."""
import ast

from conftest import ROOT

PACKAGE = ROOT / "gluondist"
# the launcher's modules and what they share; kvstore/parallel/training are fit's
LAUNCHER = ("gluondist.cli", "gluondist.heartbeat", "gluondist.kv.kinds",
            "gluondist.envvars", "gluondist.wire")


def modules():
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return found


def imports(name, path, known):
    """Every gluondist module ``name`` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rsplit(".", 1)[0]
                base = parent + ("." + node.module if node.module else "")
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                    for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m in known and m != name}


def test_no_import_cycle_in_the_launcher():
    known = modules()
    ours = {m for m in known if m.startswith("gluondist.launcher") or m in LAUNCHER}
    graph = {m: imports(m, known[m], known) & ours for m in ours}
    cycles = []

    def visit(m, path):
        for d in graph[m]:
            if d in path:
                cycles.append(path[path.index(d):] + [d])
            else:
                visit(d, path + [d])

    for m in graph:
        visit(m, [m])
    assert cycles == []


def cycles_in(graph):
    """Every import cycle of ``graph`` (module -> the modules it imports), each as a path that
    ends where it starts."""
    found, done = [], set()

    def visit(m, path):
        for d in sorted(graph[m]):
            if d in path:
                found.append(path[path.index(d):] + [d])
            elif d not in done:
                visit(d, path + [d])
        done.add(m)

    for m in sorted(graph):
        if m not in done:
            visit(m, [m])
    return found


def test_no_import_cycle_in_the_whole_package():
    """Every module of gluondist/, counting imports inside functions and at the bottom of a
    module (a late import "because it may be half-imported here" is a cycle too)."""
    known = modules()
    graph = {m: imports(m, known[m], known) for m in known}
    assert cycles_in(graph) == []


def test_the_cycle_check_finds_a_late_import(tmp_path):
    """The check above, on two modules that import each other at their bottom and inside a
    function: the cycle is found."""
    pkg = tmp_path / "gluondist"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "b.py").write_text("x = 1\nfrom .a import f  # noqa: E402\n")
    known = {"gluondist": pkg / "__init__.py", "gluondist.a": pkg / "a.py",
             "gluondist.b": pkg / "b.py"}
    graph = {m: imports(m, known[m], known) for m in known}
    assert cycles_in(graph) == [["gluondist.a", "gluondist.b", "gluondist.a"]]


def test_code_that_runs_in_the_launchers_children_imports_only_its_own_layer():
    known = modules()
    # a pod builds its role like the launcher does (roles.py); a server loads optimizers;
    # the side channel's messages and exit codes are defined once (wire.py); the signal that
    # asks a worker to stop for a resize, and its flag, once (elastic.py)
    shared = {"gluondist", "gluondist.envvars", "gluondist.launcher.roles",
              "gluondist.kv.safepickle", "gluondist.wire", "gluondist.elastic"}
    child = {m for m in known if m.startswith("gluondist.launcher.child")}
    reach = {m: imports(m, known[m], known) - child - shared for m in child}
    assert {m: found for m, found in reach.items() if found} == {}


def test_the_launcher_never_imports_training_code():
    known = modules()
    # the bench's worker and probe run inside the workers of its job
    in_workers = ("gluondist.bench.worker", "gluondist.bench.probe")
    launcher = {m for m in known if m.startswith(("gluondist.launcher", "gluondist.bench"))
                and m not in in_workers} | {"gluondist.cli"}
    training = ("gluondist.training", "gluondist.kv.node", "gluondist.kv.trainer",
                "gluondist.kvstore", "gluondist.parallel")
    reach = {m: {d for d in imports(m, known[m], known) if d.startswith(training)}
             for m in launcher}
    assert {m: found for m, found in reach.items() if found} == {}


def test_no_module_over_420_lines_and_no_function_over_60():
    """Small pieces (CONTRIBUTING): a module over 420 lines or a function over 60, docstring
    included, is split."""
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 420:
            big.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.end_lineno - node.lineno + 1 > 60:
                big.append(f"{path.relative_to(ROOT)}: {node.name} has "
                           f"{node.end_lineno - node.lineno + 1} lines")
    assert big == []
