"""The sample hostfile of docs/multi-host.md places the job as the page says: its very
command planned with --dry-run."""
import re
import shlex
import subprocess
import sys

import docpages


def test_the_sample_hostfile_places_the_job_as_the_page_says(tmp_path):
    """docs/multi-host.md's hostfile and its command, planned (--dry-run: no host is reached):
    the scheduler on node1, the servers one per host, workers 0 and 1 on node2."""
    (tmp_path / "hosts.txt").write_text(docpages.block("docs/multi-host.md", "# hosts.txt"))
    (tmp_path / "train.py").write_text("")
    [command] = docpages.commands(docpages.block("docs/multi-host.md",
                                                 "gluondist launch --launcher ssh -H hosts.txt"))
    args = shlex.split(command)[1:]
    args.insert(args.index("train.py"), "--dry-run")
    proc = subprocess.run([sys.executable, "-m", "gluondist.cli", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    placed = dict(re.findall(r"^(scheduler|server \d|worker \d) on (\S+):", proc.stdout, re.M))
    assert placed == {"scheduler": "node1", "server 0": "node2", "server 1": "node1",
                      "worker 0": "node2", "worker 1": "node2", "worker 2": "node1",
                      "worker 3": "node1"}

