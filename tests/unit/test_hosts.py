"""Hostfiles, inline hosts, Slurm's nodes and server hosts: parsed, placed and checked, in
one line where wrong (as the command reads them: launcher/test_hosts_cli.py)."""
import re

import pytest

from gluondist.launcher.hosts import (Host, Placement, gpu_list, parse_hostfile, parse_inline,
                                      parse_slurm_tasks, place)
from gluondist.launcher.errors import LaunchError
from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.plan import build_plan
from conftest import SCRIPTS


def test_hostfile_with_comments_blank_lines_and_default_slots():
    text = "# cluster\nnode1 slots=2\n\n  node2   slots = 4  # big one\nnode3\n"
    assert parse_hostfile(text) == (Host("node1", 2), Host("node2", 4), Host("node3", 1))


@pytest.mark.parametrize("text,message", [
    ("node1 slots=2\nnode2 slot=2\n", "hosts.txt line 2: 'node2 slot=2'"),
    ("node1 slots=0\n", "line 1"),
    ("node1 slots=2 extra\n", "line 1"),
    ("# nothing\n\n", "names no hosts"),
    ("a slots=1\na slots=2\n", "names host 'a' twice"),
])
def test_malformed_hostfiles_name_the_line(text, message):
    with pytest.raises(LaunchError, match=message):
        parse_hostfile(text, "hosts.txt")


def test_inline_hosts():
    assert parse_inline("h1:2,h2:2, h3") == (Host("h1", 2), Host("h2", 2), Host("h3", 1))
    for bad in ("h1:0", "h1:x", ":2", "h1:2,,h2"):
        with pytest.raises(LaunchError, match="HOST:SLOTS"):
            parse_inline(bad)


def test_placement_fills_slots_and_spreads_servers():
    a, b, c = Host("a", 2), Host("b", 2), Host("c", 1)
    assert place((a, b, c), 5, 2) == Placement(a, (a, b), (a, a, b, b, c), (0, 1, 0, 1, 0))
    assert place((a, b, c), 3, 4) == Placement(a, (a, b, c, a), (a, a, b), (0, 1, 0))
    with pytest.raises(LaunchError, match="-n 6 exceeds the 5 slots in hosts.txt; lower -n or "
                                          "add hosts"):
        place((a, b, c), 6, 1, "hosts.txt")


def test_each_worker_gets_its_own_gpus_on_its_host():
    assert [gpu_list(i, 2) for i in range(3)] == ["0,1", "2,3", "4,5"]
    options = LaunchOptions(("t.py",), 4, 1, launcher="ssh", gpus_per_worker=2,
                            hosts=(Host("h1", 2), Host("h2", 2)), kvstore="dist_device_sync")
    plan = build_plan(options, 9000, range(9001, 9006), cores=8, base_env={})
    workers = [(s.rank, s.host, s.env["CUDA_VISIBLE_DEVICES"], s.env["DMLC_NODE_HOST"])
               for s in plan.of_role("worker")]
    # ps-lite ranks descending host names first: h2's workers are ranks 0 and 1
    assert workers == [(0, "h2", "0,1", "h2"), (1, "h2", "2,3", "h2"),
                       (2, "h1", "0,1", "h1"), (3, "h1", "2,3", "h1")]
    assert {s.env["DMLC_PS_ROOT_URI"] for s in plan.specs} == {"h1"}
    assert "OMP_NUM_THREADS" not in plan.of_role("worker")[0].env  # remote cores are unknown


def test_slurm_tasks_per_node():
    nodes = ["n1", "n2", "n3", "n4"]
    assert parse_slurm_tasks(nodes, "2(x3),1", ["10.0.0.1", "n2", "10.0.0.3", "10.0.0.4"]) == (
        Host("n1", 2, "10.0.0.1"), Host("n2", 2), Host("n3", 2, "10.0.0.3"),
        Host("n4", 1, "10.0.0.4"))
    with pytest.raises(LaunchError, match="does not match the 4 node"):
        parse_slurm_tasks(nodes, "2(x2)")
    with pytest.raises(LaunchError, match="cannot read SLURM_TASKS_PER_NODE"):
        parse_slurm_tasks(nodes, "two")


def test_slurm_nodes_advertise_their_addresses_and_run_by_name():
    options = LaunchOptions(("t.py",), 2, 1, launcher="slurm",
                            hosts=(Host("n1", 1, "127.0.0.1"), Host("n2", 1, "127.0.0.2")))
    plan = build_plan(options, 9000, range(9001, 9004), base_env={})
    assert [(s.label, s.host, s.env["DMLC_NODE_HOST"]) for s in plan.specs] == [
        ("scheduler", "n1", "127.0.0.1"), ("server 0", "n1", "127.0.0.1"),
        ("worker 0", "n2", "127.0.0.2"), ("worker 1", "n1", "127.0.0.1")]


@pytest.mark.parametrize("kwargs,message", [
    (dict(launcher="pbs"), "unknown launcher 'pbs'; use one of local, ssh, slurm"),
    (dict(launcher="ssh"), "--launcher ssh needs hosts"),
    (dict(hosts=(Host("a"),)), "add --launcher ssh"),
    (dict(launcher="ssh", hosts=(Host("a"),), num_workers=2), "exceeds the 1 slots"),
    (dict(gpus_per_worker=-1), "--gpus-per-worker"),
    (dict(max_restarts=-1), "--max-restarts must be 0 or more"),
    (dict(interface="eth1"), "--interface is for multi-host jobs"),
    # gluondist.launch()'s arguments, which no click type checks
    (dict(env={"A": 1}), r"--env 'A'=1: write KEY=VALUE, both strings"),
    (dict(threads="2"), "--threads must be a whole number, at least 1, got '2'"),
    (dict(num_workers=2.0), "-n/--num-workers must be a whole number, at least 1, got 2.0"),
    (dict(start_timeout="5"), "--start-timeout must be a positive number of seconds"),
])
def test_scale_out_options_are_checked(kwargs, message):
    with pytest.raises(LaunchError, match=message):
        LaunchOptions((str(SCRIPTS / "job.py"),), **kwargs).validate()


def test_an_interface_replaces_the_node_address():
    options = LaunchOptions(("t.py",), 1, 1, launcher="ssh", interface="eth1",
                            hosts=(Host("h1", 1), Host("h2", 1)))
    plan = build_plan(options, 9000, range(9001, 9003), base_env={})
    assert [(s.label, s.env.get("DMLC_NODE_HOST"), s.env["DMLC_INTERFACE"]) for s in plan.specs] \
        == [("scheduler", "h1", "eth1"), ("server 0", None, "eth1"), ("worker 0", None, "eth1")]


def test_a_scheduler_behind_nat_is_reached_at_its_public_address():
    options = LaunchOptions(("t.py",), 1, 1, launcher="ssh", scheduler_address="203.0.113.7",
                            hosts=(Host("10.0.0.5", 1), Host("10.0.0.6", 1)))
    plan = build_plan(options, 9000, range(9001, 9003), base_env={})
    assert {s.env["DMLC_PS_ROOT_URI"] for s in plan.specs} == {"203.0.113.7"}
    assert [s.env.get("DMLC_USE_KUBERNETES") for s in plan.specs] == ["1", None, None]
    with pytest.raises(LaunchError, match="--scheduler-address is for multi-host jobs"):
        LaunchOptions((str(SCRIPTS / "job.py"),), scheduler_address="1.2.3.4").validate()


def test_servers_on_hosts_of_their_own_round_robin_n_per_host():
    a, b = Host("a"), Host("b")
    s, t = Host("s", 2), Host("t")
    assert place((a, b), 2, 3, server_hosts=(s, t)) == Placement(a, (s, t, s), (a, b), (0, 0))
    assert place((a, b), 2, 1, server_hosts=(s, t)).servers == (s,)
    with pytest.raises(LaunchError, match=r"-s 4 exceeds the 3 server slots in --server-hosts "
                                          r"s:2,t; lower -s or give more \(HOST:N takes N"):
        place((a, b), 2, 4, server_hosts=(s, t), server_source="--server-hosts s:2,t")


def test_the_plan_puts_servers_on_the_server_hosts_and_the_scheduler_on_the_first_host():
    options = LaunchOptions(("true",), 2, 2, launcher="ssh", hosts=(Host("a"), Host("b")),
                            server_hosts=(Host("s"), Host("t")))
    plan = build_plan(options.validate(), 9000, range(9001, 9005), cores=2, base_env={})
    assert [(p.label, p.host, p.env["DMLC_NODE_HOST"]) for p in plan.specs] == [
        ("scheduler", "a", "a"), ("server 0", "t", "t"), ("server 1", "s", "s"),
        ("worker 0", "b", "b"), ("worker 1", "a", "a")]
    assert options.all_hosts == (Host("a"), Host("b"), Host("s"), Host("t"))


def test_a_lost_hosts_roles_are_named_once_and_the_report_says_what_lost_can_mean():
    from gluondist.launcher.outcome import Attempt, Failure, Kind, LaunchResult
    from gluondist.launcher.plan import LaunchPlan, ProcessSpec
    from gluondist.launcher.report import final_lines
    specs = tuple(ProcessSpec(role, rank, host, ("x",), {}) for role, rank, host in (
        ("scheduler", 0, "a"), ("server", 0, "a"), ("worker", 0, "b"), ("worker", 1, "a")))
    lost = Failure(Kind.LOST_HOST, "lost the connection to host a", "worker 1", host="a")
    result = LaunchResult((Attempt(LaunchPlan(9000, specs), lost,
                                   stopped=("scheduler", "worker 0")),))
    lines = final_lines(result)
    assert lines[0] == ("gluondist: lost the connection to host a, where scheduler, server 0, "
                        "worker 1 ran")
    assert "the remote side was killed there (the OOM killer, kill -9)" in lines[1]
    assert "gluondist: stopped worker 0" in lines  # not the scheduler: it was on host a
    assert lines[-1] == "gluondist: exit code 75 (lost a host)"


@pytest.mark.parametrize("value, message", [
    (3, "server_hosts must be 'HOST[:N],...', a hostfile's path, or a list of such hosts, "
        "not 3"),
    ([("s", 1)], "server_hosts must be 'HOST[:N],...'"),
    ((Host("s"), Host("s")), "server_hosts names host 's' twice"),
    ((Host("s", -1),), "server_hosts: host 's' has -1 slots; give 1 or more")])
def test_server_hosts_of_the_wrong_kind_are_one_line(value, message):
    with pytest.raises(LaunchError, match=re.escape(message)):
        LaunchOptions(("true",), server_hosts=value)


def test_server_hosts_as_a_list_or_a_dict_read_as_the_text():
    assert LaunchOptions(("true",), server_hosts=["s", "t:2"]).server_hosts == "s,t:2"
    assert LaunchOptions(("true",), server_hosts={"s": 2}).server_hosts == "s:2"
