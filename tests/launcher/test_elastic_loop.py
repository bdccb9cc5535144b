"""Elastic jobs' transitions of the launcher's loop, fast (fake_backend.py, no MXNet): -n
MIN:MAX at the start and at a restart (shrink), --host-discovery growing a job at a checkpoint,
the refusals, and the rule on literal values. The real jobs, with fit's exact parameters, are in
e2e/test_netns.py."""
import contextlib
import os
import re
import stat
import threading

import pytest

from gluondist import elastic, wire
from gluondist.launcher import discovery, resize
from gluondist.launcher.errors import LaunchError
from gluondist.launcher.options import LaunchOptions
from gluondist.launcher.outcome import Kind
from gluondist.launcher.hosts import Host, read_hosts
from gluondist.launcher.supervisor import resolve
from gluondist.launcher.transports.ssh import SshTransport
from conftest import wait_until
from fake_backend import WORKER, run


def discovery_script(tmp_path, text):
    """An executable printing the file ``hosts.now`` (written here with ``text``)."""
    listing = tmp_path / "hosts.now"
    listing.write_text(text)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {listing}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, listing


def alternating_script(tmp_path, odd, even):
    """An executable that prints ``odd`` on its 1st, 3rd, ... call and ``even`` on the others
    (``None`` makes that call fail: exit 1, ``inventory down`` on stderr); it counts its calls
    in the file it returns too."""
    calls = tmp_path / "calls"
    calls.write_text("0")
    script = tmp_path / "flap.sh"

    def say(text):
        return "echo 'inventory down' >&2; exit 1" if text is None else f"printf '{text}'"
    script.write_text(f"#!/bin/sh\nn=$(cat {calls}); n=$((n + 1)); echo $n > {calls}\n"
                      f"if [ $((n % 2)) = 1 ]; then {say(odd)}; else {say(even)}; fi\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, calls


def discovered_job(tmp_path, script, *action, **options):
    """run() of ``fake_worker.py ACTION`` with -n 2:3 on the hosts ``script`` prints."""
    return run(tmp_path, *action, hosts=(), num_workers="2:3", host_discovery=str(script),
               **options)


@contextlib.contextmanager
def once_running(tmp_path, change):
    """``change()`` on a thread of its own once the job's workers run (they wrote
    FAKE_DIR/workers), while the block runs the job."""
    done = threading.Event()

    def wait_then_change():
        wait_until(lambda: (tmp_path / "workers").exists() or done.is_set(), timeout=60)
        if not done.is_set():
            change()
    thread = threading.Thread(target=wait_then_change)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.fixture
def quick_watch(monkeypatch):
    """The script runs every 0.2 s while the job runs (2 s otherwise)."""
    monkeypatch.setattr(discovery, "EVERY", 0.2)


def counts(tmp_path):
    return [int(n) for n in (tmp_path / "workers").read_text().split()]


def test_an_elastic_job_starts_on_the_hosts_that_answer(tmp_path, fake):
    fake.down = {"h3"}
    result, notes = run(tmp_path, "ok", hosts="h1:1,h2:1,h3:1", num_workers="2:3")
    assert (result.exit_code, result.last.workers) == (0, 2)
    assert notes[0] == "gluondist: host h3 is unreachable (down): left out of attempt 1"


def test_below_min_it_refuses_to_start_in_one_line_naming_the_hosts(tmp_path, fake):
    fake.down = {"h2", "h3"}
    with pytest.raises(LaunchError) as raised:
        run(tmp_path, "ok", hosts="h1:1,h2:1,h3:1", num_workers="2:3")
    assert str(raised.value) == (
        "cannot start: -n 2:3 needs at least 2 worker(s); the hosts that answer (h1:1) hold 1; "
        "left out (unreachable, or failing its check): h2, h3")
    assert not (tmp_path / "workers").exists()


def test_a_lost_host_shrinks_the_restart_down_to_min(tmp_path, fake):
    fake.down_from = {"h1": 2}  # worker 2 runs there, and loses its connection (255)
    result, notes = run(tmp_path, "flaky", "255", "2", hosts="h1:1,h2:1,h3:1", num_workers="2:3",
                        max_restarts=1)
    assert result.exit_code == 0
    assert [(a.workers, a.ended) for a in result.attempts] == [
        (3, "lost the connection to host h1"), (2, "succeeded")]
    assert "gluondist: host h1 lost; restarting the job (1 of 1) with 2 workers (was 3)" in notes
    assert {s.host for s in result.plan.specs} == {"h2", "h3"}


def test_a_plain_n_is_never_lowered(tmp_path, fake):
    fake.down_from = {"h1": 2}
    result, notes = run(tmp_path, "flaky", "255", "2", hosts="h1:1,h2:1,h3:1", num_workers=3,
                        max_restarts=1)
    assert result.exit_code == 75 and len(result.attempts) == 1
    assert notes[-2].startswith("gluondist: cannot restart: the hosts left have 2 slot(s) for -n 3")


def test_discovered_slots_grow_the_job_at_an_epoch_end_without_a_restart(tmp_path, fake):
    script, listing = discovery_script(tmp_path, "h1:1\nh2:1\n")
    # once the job runs its first epochs, a third host appears
    with once_running(tmp_path, lambda: listing.write_text("h1:1\nh2:1\nh3:1\n")):
        result, notes = discovered_job(tmp_path, script, "epochs", "3", max_restarts=0,
                                       log_dir=str(tmp_path / "logs"))
    assert result.exit_code == 0, notes
    assert [(a.workers, a.ended) for a in result.attempts] == [(2, "stopped to grow"),
                                                                (3, "succeeded")]
    assert (result.grows, result.restarts) == (1, ())
    assert counts(tmp_path) == [2, 2, 3, 3, 3]
    assert ("gluondist: the discovered hosts hold 3 slot(s) (h1:1, h2:1, h3:1): the job grows "
            "to 3 workers (was 2) after the workers' next checkpoint") in notes
    assert "gluondist: growing the job to 3 workers (was 2); it resumes from its last " \
           "checkpoint" in notes
    # issue 36, defect 2: the grown attempt's logs go beside the first one's, not over them
    logs = tmp_path / "logs"
    assert sorted(p.name for p in logs.glob("worker.0.*")) == ["worker.0.log",
                                                               "worker.0.restart1.log"]
    assert "worker 0 running epochs" in (logs / "worker.0.log").read_text()
    assert "worker 2 running epochs" in (logs / "worker.2.restart1.log").read_text()
    assert not (logs / "worker.2.log").exists()


def test_a_failing_discovery_script_is_named_once_and_the_job_goes_on(tmp_path, fake):
    script, listing = discovery_script(tmp_path, "h1:1\nh2:1\n")
    with once_running(tmp_path, lambda: listing.write_text("h1:1 h2:1\n")):
        result, notes = discovered_job(tmp_path, script, "epochs", "3", "50")
    told = [n for n in notes if "printed 'h1:1 h2:1'" in n]
    assert told == [f"gluondist: --host-discovery {script} printed 'h1:1 h2:1': one "
                    "HOST[:SLOTS] a line; going on with the hosts it printed before"]
    assert result.exit_code == 0 and len(result.attempts) == 1


@pytest.mark.parametrize("text, message", [
    ("", "printed no hosts; it should print HOST[:SLOTS] lines"),
    ("h1:0\n", "printed 'h1:0': one HOST[:SLOTS] a line, SLOTS >= 1"),
    ("h1\nh1:2\n", "printed host 'h1' twice; print its slots once")])
def test_discovery_that_prints_nonsense_at_the_start_is_one_line(tmp_path, fake, text, message):
    script, _ = discovery_script(tmp_path, text)
    with pytest.raises(LaunchError, match=re.escape(f"--host-discovery {script} {message}")):
        resolve(LaunchOptions((WORKER,), num_workers="1:2", launcher="fake",
                              host_discovery=str(script)), {})


@pytest.mark.parametrize("options, message", [
    (dict(launcher="slurm", num_workers="2:3"),
     "-n MIN:MAX and --host-discovery: slurm cannot change a job's worker count"),
    (dict(launcher="fake", hosts="h1", host_discovery="SCRIPT"),
     "--host-discovery gives the hosts instead of -H: drop one of them"),
    (dict(launcher="local", host_discovery="SCRIPT"), "--host-discovery finds hosts for ")])
def test_what_cannot_be_elastic_is_refused_in_one_line(tmp_path, fake, options, message):
    if options.get("host_discovery"):
        options["host_discovery"], _ = discovery_script(tmp_path, "h1\n")
    with pytest.raises(LaunchError) as raised:
        resolve(LaunchOptions((WORKER,), **options), {})
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_misspelled_hostfile_is_named_as_a_missing_file(tmp_path):
    with pytest.raises(LaunchError, match=r"^-H 'hostz\.txt': No such file or directory"):
        read_hosts("hostz.txt")
    assert read_hosts("node1.cluster")[0][0].name == "node1.cluster"


def test_a_worker_exiting_79_unasked_is_a_failure(tmp_path, fake):
    result, _ = run(tmp_path, "exit", str(elastic.EXIT), "1", num_workers="1:2")
    assert result.exit_code == elastic.EXIT and result.failure.kind is Kind.EXIT


def test_a_remote_side_that_went_silent_is_a_lost_host():
    class Child:
        exit_report, proc = wire.SILENCED, type("P", (), {"returncode": wire.SILENCED})()
    transport = SshTransport("python", {}, os.getcwd())
    assert transport.lost(Child())
    Child.exit_report = Child.proc.returncode = 143
    assert not transport.lost(Child())


def test_a_dry_run_prints_the_plan_of_now_and_the_rule(fake):
    from click.testing import CliRunner
    from gluondist.cli import cli
    fake.down = {"h3"}
    out = CliRunner().invoke(cli, ["launch", "--dry-run", "-n", "2:3", "--launcher", "fake",
                                   "-H", "h1:1,h2:1,h3:1", WORKER, "ok"])
    assert out.exit_code == 0, out.output
    # click before 8.2 (Python 3.8, 3.9) mixes stderr into output; later keeps both there
    assert "gluondist: host h3 is unreachable (down): left out of attempt 1" in out.output
    assert [l.split(" on ")[0] for l in out.output.splitlines() if " on h" in l] == [
        "scheduler", "server 0", "worker 0", "worker 1"]
    assert out.output.splitlines()[-1].startswith(
        "elastic: -n 2:3 starts 2 worker(s) now (as many as the reachable slots hold, at most "
        "3); a restart runs as many as the hosts that answer then hold, and stops below 2")


def test_a_kubernetes_manifest_refuses_min_max_in_one_line():
    from click.testing import CliRunner
    from gluondist.cli import cli
    out = CliRunner().invoke(cli, ["manifest", "kubernetes", "-n", "2:3", "--image", "x", "t.py"])
    assert out.exit_code == 2
    assert "an Indexed Job's completions are fixed, so -n takes a number here; elastic jobs " \
           "(-n MIN:MAX) need gluondist launch --launcher ssh" in out.output


def test_every_host_lost_at_once_is_named(tmp_path, fake):
    fake.down = {"h1", "h2"}  # worker 0 loses its link on h3; h1 and h2 no longer answer
    result, notes = run(tmp_path, "exit", "255", "0", hosts="h1:1,h2:1,h3:1", num_workers=3)
    assert result.exit_code == 75 and result.failure.host == "h3", notes
    assert notes[-3:] == [
        "gluondist: host h1 does not answer either (down): it was lost too, and its processes "
        "could not be stopped from here",
        "gluondist: host h2 does not answer either (down): it was lost too, and its processes "
        "could not be stopped from here",
        "gluondist: exit code 75 (lost a host)"], notes


def test_a_discovery_script_that_hangs_is_ended_with_what_it_started(tmp_path):
    from gluondist.launcher.discovery import discover
    from conftest import wait_until
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {tmp_path}/child\nwait\n")
    script.chmod(0o755)
    with pytest.raises(LaunchError, match=r"did not finish within 1s; it must print its "
                                          r"HOST\[:SLOTS\] lines and exit within that$"):
        discover(str(script), timeout=1)
    child = int((tmp_path / "child").read_text())
    wait_until(lambda: not os.path.exists(f"/proc/{child}") or
               open(f"/proc/{child}/stat").read().split()[2] == "Z", timeout=10,
               message="the script's child to be ended")


def test_a_just_lost_host_is_checked_again_only_when_the_others_fall_short(tmp_path, fake):
    fake.down_from = {"h3": 2}  # worker 2 loses its link on h1, which answers again; h3 goes
    result, notes = run(tmp_path, "flaky", "255", "2", hosts="h1:1,h2:1,h3:1",
                        num_workers="1:3", max_restarts=1)
    assert result.exit_code == 0 and result.last.workers == 1  # h2 alone suffices for MIN 1
    assert "gluondist: host h1 was lost: left out of attempt 2" in notes
    fake.checked = []
    result, notes = run(tmp_path, "flaky", "255", "2", hosts="h1:1,h2:1,h3:1",
                        num_workers="2:3", max_restarts=1)
    assert result.exit_code == 0, notes
    assert {s.host for s in result.plan.specs} == {"h1", "h2"}
    assert [c for c in fake.checked if c[0] == 2] == [(2, ("h2", "h3")), (2, ("h1",))]
    assert notes.count("gluondist: host h3 is unreachable (down): left out of attempt 2") == 1


def test_a_flapping_host_never_restarts_the_job_for_the_same_count(tmp_path, fake,
                                                                   quick_watch):
    # issue 36, defect 9: h3 is listed on every other call; a grow is asked only when the
    # listing right before asking still holds more slots, which a flapping host never does
    script, calls = alternating_script(tmp_path, "h1:1\\nh2:1\\n", "h1:1\\nh2:1\\nh3:1\\n")
    result, notes = discovered_job(tmp_path, script, "epochs", "3", "40")
    assert result.exit_code == 0, notes
    assert int(calls.read_text()) >= 6  # h3 came and went several times meanwhile
    assert [(a.workers, a.ended) for a in result.attempts] == [(2, "succeeded")]
    assert not [n for n in notes if "grow" in n], notes


def test_a_grow_whose_host_left_before_the_restart_says_so(tmp_path, fake, monkeypatch,
                                                            quick_watch):
    # issue 36, defect 9: asked to grow onto h3, which is no longer listed once the workers
    # stopped: the job starts again with as many workers, says why, and counts no growth
    script, listing = discovery_script(tmp_path, "h1:1\nh2:1\n")
    ask = resize.Grower.hosts_changed

    def ask_then_cut(self, hosts):
        ask(self, hosts)
        if self.asked.is_set():
            listing.write_text("h1:1\nh2:1\n")
    monkeypatch.setattr(resize.Grower, "hosts_changed", ask_then_cut)
    with once_running(tmp_path, lambda: listing.write_text("h1:1\nh2:1\nh3:1\n")):
        result, notes = discovered_job(tmp_path, script, "epochs", "3", "30")
    assert result.exit_code == 0, notes
    assert [(a.workers, a.ended) for a in result.attempts] == [(2, "stopped to grow"),
                                                                (2, "succeeded")]
    assert not [n for n in notes if "growing the job to 2 workers (was 2)" in n]
    assert "gluondist: the discovered hosts no longer hold more slots than the job's 2 " \
           "workers: starting it again with 2; it resumes from its last checkpoint" in notes
    assert result.grows == 0 and not [n for n in notes if "after growing" in n]
    assert notes[-1] == "gluondist: succeeded after stopping 1 time(s) to grow onto hosts gone " \
                        "by the restart"


def test_a_discovery_script_that_fails_every_other_call_is_named_once(tmp_path, fake,
                                                                      quick_watch):
    # issue 36, defect 10: named again only once it has worked for a while (a minute)
    script, calls = alternating_script(tmp_path, "h1:1\\nh2:1\\n", None)
    result, notes = discovered_job(tmp_path, script, "epochs", "3", "30")
    assert result.exit_code == 0, notes
    assert int(calls.read_text()) >= 6
    told = [n for n in notes if "inventory down" in n]
    assert told == [f"gluondist: --host-discovery {script} failed with exit code 1: inventory "
                    "down; going on with the hosts it printed before"], notes


def test_a_failing_script_is_named_again_once_it_had_worked_for_a_while(tmp_path,
                                                                        monkeypatch):
    script, _ = alternating_script(tmp_path, None, "h1:1\\n")
    said = []
    watch = discovery.Watcher(str(script), (), lambda hosts: None, said.append)
    for _ in range(4):  # fails, works, fails, works: within RECOVERED, said once
        watch.run_now()
    assert len(said) == 1
    monkeypatch.setattr(discovery, "RECOVERED", 0.0)  # a run that works is enough now
    assert [watch.run_now() for _ in range(2)] == [None, (Host("h1", 1),)]
    assert len(said) == 1  # that failure followed no run that worked "long": not said
    assert watch.run_now() is None and len(said) == 2  # this one did: said


def test_a_flaky_discovery_script_still_grows_the_job(tmp_path, fake, quick_watch):
    # a script failing every other call failed the re-check right before the ask, and the
    # watch, acting only on a changed listing, never asked again: the job never grew
    script, listing = discovery_script(tmp_path, "h1:1\nh2:1\n")
    calls = tmp_path / "calls"
    calls.write_text("0")
    script.write_text(f"#!/bin/sh\nn=$(cat {calls}); n=$((n + 1)); echo $n > {calls}\n"
                      f"if [ $((n % 2)) = 1 ]; then cat {listing}; "
                      "else echo 'inventory down' >&2; exit 1; fi\n")
    with once_running(tmp_path, lambda: listing.write_text("h1:1\nh2:1\nh3:1\n")):
        result, notes = discovered_job(tmp_path, script, "epochs", "3", "100")
    assert result.exit_code == 0, notes
    assert [(a.workers, a.ended) for a in result.attempts] == [(2, "stopped to grow"),
                                                                (3, "succeeded")], notes
    assert len([n for n in notes if "inventory down" in n]) == 1, notes
