"""A test cluster of hosts made of Linux network namespaces, with links that can be cut.

Each host is a namespace with one interface (``eth0``, its own address on a /24) cabled by a
veth pair to a bridge that lives in a namespace of its own, and nothing else: no default route,
no way out but the bridge. The test process (the launcher's side) reaches the bridge through one
more veth pair, so the hosts are reachable from here and from each other, and nowhere else is
reachable from them. Every host runs its own sshd on port 22 with a throwaway host key and one
throwaway client key; ``ssh -F cluster.ssh_config ADDRESS`` logs in as root.

Each host's link is shaped with ``tc qdisc tbf`` in both directions (netem is not in this
kernel). ``cut`` detaches a host's cable from the bridge: packets are dropped silently, as on
a pulled cable, while the host's own interface stays up. ``heal`` plugs it back in.

    with Cluster(3, tmp_path, rate="1gbit") as cluster:
        a, b, c = cluster.hosts          # addresses: "10.77.41.1", ...
        cluster.cut(b); cluster.heal(b)
        cluster.pids(b)                   # the processes on b, sshd's own left out
        cluster.crash(b)                  # b dies, sshd too: connections end, new ones refused
        cluster.kill(b)

Everything is torn down when the ``with`` ends, however it ends; namespaces left by a test
process that was killed outright are removed by the next Cluster (their name holds the pid).
Needs root, ``ip``, ``tc`` and sshd: ``unavailable()`` says which is missing, ``require()``
skips the calling test with that reason (fails it under CI, whose .ci/run installs them).
"""
from __future__ import annotations

import fcntl
import itertools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
PREFIX = "gdn-"  # every namespace this module makes; the next field is the owner's pid in hex
_COUNTER = itertools.count()


def unavailable() -> Optional[str]:
    """Why a namespace cluster cannot be built here, in one line, or None."""
    if os.geteuid() != 0:
        return "network-namespace cluster needs root"
    for tool, path in (("ip", shutil.which("ip")), ("tc", shutil.which("tc")),
                       ("sshd", SSHD if os.path.exists(SSHD) else None)):
        if path is None:
            package = "openssh-server" if tool == "sshd" else "iproute2"
            return f"network-namespace cluster needs {tool}: apt-get install {package} " \
                   "(.ci/run does)"
    return None


def require() -> None:
    """Skip the calling test, in one line, when a cluster cannot be built here; under CI (which
    installs what it needs) fail it instead."""
    import pytest
    reason = unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def netns_pids(ns: str) -> List[int]:
    out = sh("ip", "netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split()]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_namespace(ns: str) -> None:
    """Kill whatever runs in ``ns``, then delete it (a namespace with processes in it would
    outlive its name)."""
    deadline = time.monotonic() + 10
    while True:
        pids = netns_pids(ns)
        if not pids or time.monotonic() > deadline:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    sh("ip", "netns", "del", ns, check=False)
    shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)  # own_hostname's


def sweep_orphans() -> None:
    """Remove the namespaces of test processes that no longer exist."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX):].split("-")[0]
        try:
            pid = int(owner, 16)
        except ValueError:
            continue
        if not _alive(pid):
            remove_namespace(name)


def _free_subnet() -> str:
    """A 10.77.X.0/24 that no route of this machine uses."""
    routes = sh("ip", "-4", "route", "show", "table", "all", check=False).stdout
    choices = [x for x in range(1, 255) if f"10.77.{x}." not in routes]
    return f"10.77.{random.choice(choices)}"


def rate_bits(rate: str) -> float:
    """tc's rate (``200mbit``, ``1gbit``) in bits per second: at least 1kbit, or ValueError in
    one line (tc refuses a rate that rounds to 0)."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", rate)
    bits = float(found.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[found.group(2)] \
        if found else 0
    if bits < 1e3:
        raise ValueError(f"--rate {rate}: give a rate of at least 1kbit as tc does, such as "
                         "200mbit or 1gbit")
    return bits


def _burst(rate: str) -> str:
    """tbf's bucket: 10 ms at ``rate`` (at least 32 KB, so one MTU-sized packet always fits)."""
    return f"{max(32 * 1024, int(rate_bits(rate) / 8 / 100))}b"


class Cluster:
    """``k`` hosts on one bridge; see the module's docstring. ``hosts``: their addresses."""

    def __init__(self, k: int, workdir, rate: str = "1gbit", own_hostname: bool = False):
        self.k, self.rate, self.dir = k, rate, Path(workdir)
        # each host resolves this machine's name to its own address (Gloo binds that one),
        # through the /etc/hosts that `ip netns exec` mounts from /etc/netns/NS/
        self.own_hostname = own_hostname
        self.id = f"{os.getpid():x}-{next(_COUNTER)}"
        self.bridge_ns = f"{PREFIX}{self.id}-br"
        self.subnet = ""  # 10.77.X, picked by start()
        self.hosts: List[str] = []
        self.ns: Dict[str, str] = {}
        self.port: Dict[str, str] = {}
        self.uplink = f"gdl{os.getpid() % 100000}{next(_COUNTER)}"[:15]
        self.ssh_config = str(self.dir / "ssh_config")
        self._made: List[str] = []

    def __enter__(self) -> "Cluster":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        sweep_orphans()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._add_ns(self.bridge_ns)
        self._in(self.bridge_ns, "ip", "link", "add", "br0", "type", "bridge")
        self._in(self.bridge_ns, "ip", "link", "set", "br0", "up")
        sh("ip", "link", "add", self.uplink, "type", "veth", "peer", "name", "up0",
           "netns", self.bridge_ns)
        self._made.append(self.uplink)
        with open("/tmp/gluondist-netns.lock", "w") as lock:  # two clusters, two subnets
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = _free_subnet()
            sh("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.uplink)
        self.hosts = [f"{self.subnet}.{i + 1}" for i in range(self.k)]
        self.ns = {a: f"{PREFIX}{self.id}-h{i + 1}" for i, a in enumerate(self.hosts)}
        self.port = {a: f"p{i + 1}" for i, a in enumerate(self.hosts)}
        sh("ip", "link", "set", self.uplink, "up")
        self._in(self.bridge_ns, "ip", "link", "set", "up0", "master", "br0", "up")
        for address in self.hosts:
            self._add_host(address)
        self._keys()
        for address in self.hosts:
            self._sshd(address)
        for address in self.hosts:
            self._wait_for_sshd(address)

    def _add_ns(self, ns: str) -> None:
        sh("ip", "netns", "add", ns)
        self._made.append(ns)
        self._in(ns, "ip", "link", "set", "lo", "up")

    def _in(self, ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *argv, check=check)

    def _add_host(self, address: str) -> None:
        ns, port = self.ns[address], self.port[address]
        self._add_ns(ns)
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
           "netns", self.bridge_ns)
        self._in(ns, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
        self._in(ns, "ip", "link", "set", "eth0", "up")
        if self.own_hostname:  # before its sshd starts, whose sessions then see it
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n")
        self._in(self.bridge_ns, "ip", "link", "set", port, "master", "br0", "up")
        self.shape(address, self.rate)

    def shape(self, address: str, rate: str) -> None:
        """Limit ``address``'s link to ``rate`` (tc's units: 100mbit, 1gbit) both ways."""
        burst = _burst(rate)
        for ns, dev in ((self.ns[address], "eth0"), (self.bridge_ns, self.port[address])):
            self._in(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                     "burst", burst, "latency", "50ms")

    def _keys(self) -> None:
        for name in ("host_key", "id"):
            if not (self.dir / name).exists():
                sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / name))
        shutil.copy(self.dir / "id.pub", self.dir / "authorized_keys")
        Path(self.ssh_config).write_text(
            f"Host *\n  Port 22\n  IdentityFile {self.dir / 'id'}\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n")
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory

    def _sshd(self, address: str) -> None:
        config = self.dir / f"sshd_config.{address}"
        config.write_text(
            f"Port 22\nListenAddress {address}\nHostKey {self.dir / 'host_key'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"PidFile {self.dir / f'sshd.{address}.pid'}\n")
        with open(self.dir / f"sshd.{address}.log", "wb") as log:
            subprocess.Popen(["ip", "netns", "exec", self.ns[address], SSHD, "-D", "-e", "-f",
                              str(config)], stdout=log, stderr=log, start_new_session=True)

    def _wait_for_sshd(self, address: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                s.settimeout(1.0)
                if s.connect_ex((address, 22)) == 0:
                    return
            if time.monotonic() > deadline:
                log = (self.dir / f"sshd.{address}.log").read_text(errors="replace")
                raise RuntimeError(f"sshd on {address} did not listen within {timeout:g}s: "
                                   f"{log[-500:]}")
            time.sleep(0.05)

    def cut(self, address: str) -> None:
        """Unplug ``address``'s cable: from now on its packets are silently dropped."""
        self._in(self.bridge_ns, "ip", "link", "set", self.port[address], "nomaster")

    def heal(self, address: str) -> None:
        self._in(self.bridge_ns, "ip", "link", "set", self.port[address], "master", "br0")

    def pids(self, address: str) -> List[int]:
        """Live processes on ``address``, its sshd's own (daemon and sessions) left out."""
        return [p for p in netns_pids(self.ns[address])
                if _comm(p) not in ("sshd", "") and _state(p) != "Z"]

    def kill(self, address: str) -> None:
        for pid in self.pids(address):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def crash(self, address: str) -> None:
        """Everything on ``address`` dies at once, sshd included: its connections end at once
        (unlike a cut) and new ones are refused, so a test of what follows a lost host need
        not wait for ssh's keepalive and connect timeouts."""
        for pid in netns_pids(self.ns[address]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def run(self, address: str, *argv: str, **kwargs) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``address`` (in its namespace), like subprocess.run."""
        return subprocess.run(["ip", "netns", "exec", self.ns[address], *argv], **kwargs)

    def close(self) -> None:
        """Kill everything on the cluster and remove it; safe to call more than once."""
        for ns in reversed([n for n in self._made if n.startswith(PREFIX)]):
            remove_namespace(ns)
        if self.uplink in self._made:  # normally gone with its peer in the bridge namespace
            sh("ip", "link", "del", self.uplink, check=False)
        self._made = []


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return ""
