"""The launcher's layers in a fresh interpreter: its lower modules import neither click nor
MXNet, and what a worker or a pod imports first is the standard library only (the import
graph without running it: unit/test_layers.py)."""
import subprocess
import sys


# sys.stdlib_module_names is 3.10's; before, the standard library is what is built in or lives
# in its directory outside site-packages
STANDARD = ("import sys, sysconfig\n"
            "def standard(names):\n"
            "    if hasattr(sys, 'stdlib_module_names'):\n"
            "        return set(sys.stdlib_module_names)\n"
            "    lib, site = sysconfig.get_paths()['stdlib'], sysconfig.get_paths()['purelib']\n"
            "    where = {m: getattr(sys.modules.get(m), '__file__', None) or '' for m in names}\n"
            "    return {m for m, f in where.items() if m in sys.builtin_module_names\n"
            "            or f.startswith(lib) and not f.startswith(site)}\n")


def test_lower_layers_import_neither_click_nor_mxnet():
    code = ("import sys; import gluondist.launcher.supervisor, gluondist.launcher.api, "
            "gluondist.heartbeat, gluondist.launcher.kubernetes, gluondist.launcher.child.pod; "
            "import gluondist.bench.kvstore as b; b.sent_sizes(b.key_sizes(8, 2), 1 << 20); "
            "bad = {'click', 'mxnet'} & set(sys.modules); assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_what_workers_and_pods_import_first_is_standard_library():
    code = (STANDARD + "before = set(sys.modules); import gluondist.heartbeat, "
            "gluondist.launcher.child.bootstrap, gluondist.launcher.child.pod, "
            "gluondist.launcher.roles; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "extra = new - standard(new) - {'gluondist'}; "
            "assert not extra, extra")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

