"""How many workers each attempt of a job gets (gluondist.launcher.resize), on literal
options and hosts: -n MIN:MAX read, the count an attempt gets on the hosts that answer, the
refusals below MIN or short of -s, and the rule --dry-run says. Driven through the launcher's
loop with real processes: launcher/test_elastic_loop.py."""
import dataclasses

import pytest

from gluondist.launcher import resize
from gluondist.launcher.hosts import Host

from gluondist.launcher.errors import LaunchError
from gluondist.launcher.options import LaunchOptions
from fake_backend import WORKER


def test_n_min_max_parses_and_bad_values_are_one_line():
    options = LaunchOptions((WORKER,), num_workers="2:3")
    assert (options.fewest_workers, options.num_workers, options.elastic) == (2, 3, True)
    assert LaunchOptions((WORKER,), num_workers=(1, 4)).fewest_workers == 1
    assert not LaunchOptions((WORKER,), num_workers="3").elastic
    with pytest.raises(LaunchError, match=r"^-n '2:x': give N, or MIN:MAX for an elastic job"):
        LaunchOptions((WORKER,), num_workers="2:x")
    with pytest.raises(LaunchError, match=r"^-n/--num-workers' MIN must be a whole number, "
                                          r"1\.\.2, got 3 \(MIN:MAX, MIN at most MAX\)$"):
        LaunchOptions((WORKER,), num_workers="3:2").validate()


H1, H2, H3 = Host("h1", 2), Host("h2", 1), Host("h3", 1)


def test_an_elastic_attempt_runs_as_many_as_the_hosts_that_answer_hold_up_to_max():
    job = LaunchOptions((WORKER,), num_workers="2:3", hosts=(H1, H2, H3))
    options, why = resize.sized(job, job, (H1, H2, H3), ())
    assert (options.num_workers, options.hosts, why) == (3, (H1, H2, H3), "")  # 4 slots, MAX 3
    options, why = resize.sized(job, job, (H2, H3), ())
    assert (options.num_workers, options.hosts) == (2, (H2, H3))  # a shrink to what is left
    options, why = resize.sized(job, job, (H3,), ())
    assert options is None
    assert why == "-n 2:3 needs at least 2 worker(s); the hosts that answer (h3:1) hold 1"


def test_a_fixed_count_is_never_lowered_nor_is_s():
    job = LaunchOptions((WORKER,), num_workers=3, hosts=(H1, H2))
    assert resize.sized(job, job, (H1, H2), ())[0].num_workers == 3
    options, why = resize.sized(job, job, (H1,), ())
    assert options is None and why.startswith("the hosts left have 2 slot(s) for -n 3; -n is "
                                              "never lowered")
    servers = LaunchOptions((WORKER,), num_workers="1:3", num_servers=2, hosts=(H1,),
                            server_hosts=(H2, H3))
    options, why = resize.sized(servers, servers, (H1,), (H2,))
    assert options is None and why.startswith("the server hosts left (h2:1) have 1 server "
                                              "slot(s) for -s 2; -s is never lowered")


def test_the_attempt_keeps_the_options_and_takes_the_hosts_and_count():
    job = LaunchOptions((WORKER,), num_workers="1:4", hosts=(H1, H2), max_restarts=5)
    options, _ = resize.sized(job, job, (H2,), ())
    assert options == dataclasses.replace(job, hosts=(H2,), num_workers=1)


def test_the_dry_run_rule_says_how_each_attempt_is_sized():
    local = LaunchOptions((WORKER,), num_workers="2:3")
    assert resize.rule(local, 3).startswith("elastic: -n 2:3 on this machine runs 3 workers "
                                            "on every attempt")
    hosts = LaunchOptions((WORKER,), num_workers="2:3", hosts=(H1, H2))
    text = resize.rule(hosts, 3)
    assert text.startswith("elastic: -n 2:3 starts 3 worker(s) now") and \
        "stops below 2" in text and "--host-discovery" not in text
    assert resize.slots((H1, H2, H3)) == 4 and resize.workers_flag(
        LaunchOptions((WORKER,), num_workers=3)) == "-n 3"
