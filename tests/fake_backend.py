"""A backend in one module, for the launcher's fast tests: its processes are tiny real ones
without MXNet (scripts/fake_node.py stands in for the scheduler and servers; workers run
scripts/fake_worker.py under gluondist's real bootstrap), on any host names, all on this
machine. Registered with ``transports.register(Fake())``: nothing else in gluondist changes.

A worker that exits with ssh's 255 lost its connection, as over ssh; hosts named in
``Fake.down`` fail the check before a restart and are left out. ``FakeSsh`` is the real ssh
backend with the same stand-in nodes, for use with tests/bin/ssh first on PATH."""
from __future__ import annotations

import os
import sys
import uuid
from dataclasses import replace
from pathlib import Path

from conftest import TAG, tagged_pids
from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.ports import free_ports
from gluondist.launcher.supervisor import launch_job
from gluondist.launcher.transports import Backend
from gluondist.launcher.transports.local import LocalTransport
from gluondist.launcher.transports.ssh import Ssh, SshTransport

NODE = str(Path(__file__).parent / "scripts" / "fake_node.py")
WORKER = str(Path(__file__).parent / "scripts" / "fake_worker.py")
LOST = 255
# Coverage (pyproject.toml: patch = subprocess) measures the launcher's processes; the stand-in
# nodes are the tests' own, and starting coverage in each cost the control loop's tests a
# quarter of their CPU under `coverage run` (their one call into gluondist, port_taken, counts
# as unrun)
UNMEASURED = {"COVERAGE_PROCESS_CONFIG": ""}


class FakeTransport(LocalTransport):
    def spawn(self, spec, progress=False, error_file=None):
        if spec.role != "worker":
            spec = replace(spec, argv=(sys.executable, NODE), env={**spec.env, **UNMEASURED})
        return super().spawn(spec, progress, error_file)

    def lost(self, child) -> bool:
        return child.proc.returncode == LOST


class Fake(Backend):
    name = "fake"
    multi_host = takes_hosts = True

    def __init__(self):
        self.down = set()  # hosts that fail every check (at the start and before a restart)
        self.down_from = {}  # host -> the first attempt whose check it fails
        self.checked = []  # (attempt, hosts checked)

    def transport(self, options, env):
        return FakeTransport()

    def unreachable(self, names, options):
        return {name: "down" for name in names if name in self.down}

    def reachable(self, hosts, server_hosts, options, attempt, show):
        self.checked.append((attempt, tuple(h.name for h in hosts)))
        down = self.down | {h for h, first in self.down_from.items() if attempt >= first}
        for name in sorted({h.name for h in hosts} & down):
            show(f"gluondist: host {name} is unreachable (down): left out of attempt {attempt}",
                 True)
        return (tuple(h for h in hosts if h.name not in down),
                tuple(h for h in server_hosts if h.name not in down))


class FakeSshTransport(SshTransport):
    """The real ssh transport (tests/bin/ssh stands in for ssh on PATH), the fake nodes."""

    def spawn(self, spec, progress=False, error_file=None):
        if spec.role != "worker":
            spec = replace(spec, argv=(sys.executable, NODE), env={**spec.env, **UNMEASURED})
        return super().spawn(spec, progress, error_file)


class FakeSsh(Ssh):
    name = "fakessh"

    def transport(self, options, env):
        self.preflight(options)
        return FakeSshTransport(options.python, env, os.getcwd(), options.ssh_config)


def run(tmp_path, *action, tag="", hosts="h1:1,h2:1", launcher="fake", stop=None, ports=None,
        **options):
    """The job ``fake_worker.py ACTION`` through the fake backend; its result and what the
    console showed (notes on stderr)."""
    shown = []
    tag = tag or uuid.uuid4().hex
    env = {"FAKE_DIR": str(tmp_path), TAG: tag, **options.pop("env", {})}
    opts = LaunchOptions((WORKER, *action), num_workers=options.pop("num_workers", 2),
                         launcher=launcher, hosts=hosts, env=env, **options)
    result = launch_job(opts, lambda text, note: shown.append((text, note)), keep_logs=True,
                        stop=stop, ports=ports or free_ports)
    notes = [text for text, note in shown if note]
    assert tagged_pids(tag) == []  # nothing of the job outlives it
    return result, notes
