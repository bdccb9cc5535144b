"""Servers on hosts of their own, and the bench's model of their links, on a cluster of
network-namespace hosts (tests/netns.py) with 200 Mbit/s links. How close the model's step
times come to the measured ones is a benchmark's question: benchmarks/cost_model.py."""
import json

import pytest

import netns
from conftest import SCRIPTS, run_cli, wait_until

RATE = "200mbit"


@pytest.fixture
def cluster(tmp_path):
    """Four hosts: two for the workers, two for servers."""
    netns.require()
    with netns.Cluster(4, tmp_path / "net", rate=RATE) as made:
        yield made


def roles_on(cluster, host):
    """The DMLC_ROLE of each gluondist process running on ``host``."""
    roles = []
    for pid in cluster.pids(host):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if b"DMLC_ROLE" in env and b"GLUONDIST_TEST_TAG" in env:
            roles.append(env[b"DMLC_ROLE"].decode())
    return sorted(roles)


def test_servers_run_on_the_server_hosts_and_the_job_trains(launch, cluster, tmp_path):
    a, b, s, t = cluster.hosts
    job = launch("--launcher", "ssh", "--ssh-config", cluster.ssh_config, "-H", f"{a}:1,{b}:1",
                 "--server-hosts", f"{s},{t}", "-n", 2, "-s", 2,
                 SCRIPTS / "chunked_job.py", tmp_path)
    seen = {}

    def placed():
        assert job.proc.poll() is None, job.wait()
        for host in cluster.hosts:
            seen[host] = roles_on(cluster, host)
        return sum(map(len, seen.values())) == 5  # each ssh session starts on its own
    wait_until(placed, timeout=120, interval=0.2, message="every role on its host")
    assert seen[s] == seen[t] == ["server"]
    assert seen[a] == ["scheduler", "worker"] and seen[b] == ["worker"]
    assert job.wait(timeout=240) == 0, job.err
    assert (tmp_path / "params.npz").exists()  # two fits trained across the four hosts


def test_the_bench_runs_both_layouts_on_their_hosts_and_models_their_links(cluster):
    # How close the model comes to the step times is a figure of the clock, which
    # benchmarks/cost_model.py measures on the median of repeated runs; the order of the rows
    # for several counts is unit/test_bench.py's. Here, on real links: 2 MB in two chunks of 1 MiB,
    # each whole on one of the two servers, and the probe measured the links
    a, b, s, t = cluster.hosts
    out = run_cli("bench", "kvstore", "--launcher", "ssh", "--ssh-config", cluster.ssh_config,
                  "-H", f"{a}:1,{b}:1", "--server-hosts", f"{s},{t}", "-n", 2,
                  "--servers", 2, "--mbytes", 2, "--keys", 1, "--steps", 1,
                  "--chunk-bytes", 1 << 20, "--json",
                  timeout=600)
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    rows = json.loads(out.stdout.strip().splitlines()[-1])["rows"]
    assert [(r["servers"], r["layout"]) for r in rows] == [(2, "colocated"), (2, "dedicated")]
    # calibrated by the first row; the second scaled by what the busiest link carries in the
    # placement its job ran, MiB of chunks plus the pipeline's fill (model.py): 2 + 1 with
    # the servers on the workers' hosts, 2 + 2 on hosts of their own
    first, dedicated = rows
    assert dedicated["predicted_step_s"] / first["step_s"] == pytest.approx(4 / 3)
    assert dedicated["link_bound_s"] == pytest.approx(first["link_bound_s"])
    assert all(r["step_s"] > 0 and r["link_efficiency"] > 0 for r in rows), rows
