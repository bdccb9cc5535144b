"""The servers' side of the pickle rule in real jobs: a malicious optimizer runs nothing and
fails the job naming the server, a server's exception fails the job, and dist_async works
with every built-in optimizer and scheduler (the unpickler alone: unit/test_security.py)."""
from conftest import SCRIPTS


def test_a_malicious_optimizer_runs_nothing_and_fails_the_job_naming_the_server(launch,
                                                                                tmp_path):
    job = launch("-n", 2, "-s", 1, SCRIPTS / "server_attack.py", "pickle", tmp_path)
    assert job.wait() != 0
    assert not (tmp_path / "pwned").exists()
    assert "server 0 failed first: refused a command (exit code 77)" in job.err, job.err
    assert job.proc.returncode == 77
    assert "refused a command that would load posix.system" in job.err + job.out
    assert not list(tmp_path.glob("*.done"))
    assert job.leftovers() == []


def test_a_servers_exception_fails_the_job(launch, tmp_path):
    job = launch("-n", 2, "-s", 1, SCRIPTS / "server_attack.py", "raises", tmp_path)
    assert job.wait() != 0
    assert "server 0 failed first: exit code 1" in job.err, job.err
    assert "the optimizer's update raised" in job.err + job.out
    assert "AttributeError" in job.err + job.out


def test_dist_async_works_with_the_builtin_optimizers_and_schedulers(launch):
    job = launch("-n", 1, "-s", 1, "--kvstore", "dist_async", SCRIPTS / "async_optimizers.py")
    assert job.wait(timeout=300) == 0, job.err
    done = [line.split()[3] for line in job.out.splitlines() if " same " in line]
    assert done == ["adam", "sgd", "nag", "rmsprop", "adagrad", "adadelta", "ftml", "signum",
                    "lamb", "adamax", "ftrl", "dcasgd", "lars", "lbsgd", "sgd"]
    refusals = [line for line in job.out.splitlines() if "refused: " in line]
    assert len(refusals) == 2
    assert "not __main__.MyOptimizer: use a built-in one, or dist_sync" in refusals[0]
    assert "numpy numbers (optimizer.lr): give Python numbers" in refusals[1]
