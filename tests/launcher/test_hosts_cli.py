"""Hosts as the command reads them: -H and --hostfile checked before anything starts, bad
--server-hosts in one line and exit 2, and the dry run's placement (the parsing and placing
alone: unit/test_hosts.py)."""

import pytest

from gluondist.launcher.errors import LaunchError
from conftest import SCRIPTS


def test_a_single_host_needs_no_count_and_a_hostfile_line_no_colon(tmp_path):
    from conftest import run_cli
    out = run_cli("launch", "-n", 2, "-s", 1, "--launcher", "ssh", "-H", "a:2",
                  "--server-hosts", "s", "--dry-run", "--", "true")
    assert out.returncode == 0 and "server 0 on s:" in out.stdout, out.stderr
    hostfile = tmp_path / "servers.txt"
    hostfile.write_text("s:2\n")
    out = run_cli("launch", "-n", 2, "--launcher", "ssh", "-H", "a:2", "--server-hosts",
                  hostfile, "--dry-run", "--", "true")
    assert out.returncode == 2 and "line 1: 's:2': a hostfile line is `HOST slots=N`" in \
        out.stderr, out.stderr


@pytest.mark.parametrize("args, message", [
    (["--server-hosts", "s:1"], "--server-hosts puts the servers on hosts of their own, which "
                                "needs --launcher ssh"),
    (["--launcher", "ssh", "-H", "a:1,b:1", "--server-hosts", "s:1,s:2"],
     "--server-hosts 's:1,s:2' names host 's' twice"),
    (["--launcher", "ssh", "-H", "a:1,b:1", "--server-hosts", "s:0"],
     "--server-hosts 's:0': write HOST:N,HOST:N (N >= 1; HOST alone means 1)"),
    (["--launcher", "ssh", "-H", "a:1,b:1", "--server-hosts", "s:"],
     "--server-hosts 's:': write HOST:N"),
    (["--launcher", "ssh", "-H", "a:1,b:1", "-s", "3", "--server-hosts", "s:2"],
     "-s 3 exceeds the 2 server slots in --server-hosts s:2"),
    (["--launcher", "ssh", "-H", "a:1,b:1", "--server-hosts", "./missing-file"],
     "--server-hosts './missing-file': No such file or directory; give a hostfile or HOST:N"),
])
def test_bad_server_hosts_are_one_line_and_exit_2(args, message, tmp_path):
    from conftest import run_cli
    out = run_cli("launch", "-n", 2, *args, "--dry-run", "--", "true")
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_dry_run_shows_the_servers_on_their_hosts(tmp_path):
    from conftest import run_cli
    hostfile = tmp_path / "servers.txt"
    hostfile.write_text("s slots=2\n")
    out = run_cli("launch", "-n", 2, "-s", 2, "--launcher", "ssh", "-H", "a:1,b:1",
                  "--server-hosts", hostfile, "--dry-run", "--", "true")
    assert out.returncode == 0, out.stderr
    placed = [line.split(":")[0] for line in out.stdout.splitlines() if " on " in line]
    assert placed == ["scheduler on a", "server 0 on s", "server 1 on s", "worker 0 on b",
                      "worker 1 on a"]


def test_launchs_arguments_are_checked_before_anything_starts():
    import gluondist
    with pytest.raises(LaunchError, match="both strings"):  # not a TypeError from Popen
        gluondist.launch(str(SCRIPTS / "job.py"), num_workers=2, env={"A": 1}, echo=False)

