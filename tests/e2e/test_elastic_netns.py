"""Elastic jobs on hosts that can really be lost (tests/netns.py): fit shrinks from 3 workers to
2 when a host goes for good, grows from 2 to 3 when --host-discovery lists a new host, and
ends with the parameters of one process with the job's global batch (which is what an
uninterrupted run ends with: e2e/test_fit_job.py); below MIN nothing starts; an outage of any
length ends either unchanged or as a named lost host.

Each test prints what it measured (run with -s); benchmarks/elastic.py times the transitions."""
import json
import re
import time

import pytest

import netns
from conftest import SCRIPTS, assert_arrays_close, job_results, one_process, wait_until
from gluondist.launcher.outcome import LOST_EXIT

SCRIPT = str(SCRIPTS / "fit_job.py")
EPOCHS = 5


@pytest.fixture
def cluster(tmp_path):
    netns.require()
    with netns.Cluster(3, tmp_path / "net", rate="1gbit") as made:
        yield made


def fit(launch, cluster, tmp_path, *args, batch_sleep=0.25, batch=32, **more):
    """fit_job.py (``batch`` per worker at the first start) over ssh."""
    opts = {"ckpt": str(tmp_path / "ckpt"), "batch_sleep": batch_sleep, **more}
    return launch("--launcher", "ssh", "--ssh-config", cluster.ssh_config, "-s", 1, *args,
                  SCRIPT, tmp_path, EPOCHS, batch, json.dumps(opts))


def hostfile(tmp_path, hosts, name="hosts"):
    path = tmp_path / name
    path.write_text("".join(f"{h} slots=1\n" for h in hosts))
    return path


def epochs_done(job, tmp_path, count):
    def done():
        assert job.proc.poll() is None, job.wait()
        return len(list((tmp_path / "ckpt").glob("ckpt-*"))) >= count
    wait_until(done, timeout=180, interval=0.1, message=f"{count} epoch(s) to be checkpointed")


def like_one_process(tmp_path, workers, global_batch, opts=None):
    """Every worker ends with one process's arrays for that global batch, each within
    relative 1e-5 of the one of its name (1e-4 with BatchNorm summed over the job: in float32
    MXNet's own BatchNorm sums a channel's 9,216 values one by one, and an uninterrupted job
    ends 1.3e-5 from it, in a running mean)."""
    ref, _ = one_process(EPOCHS, global_batch, opts)
    params, _ = job_results(tmp_path, workers)
    rtol = 1e-4 if (opts or {}).get("sync_batchnorm") else 1e-5
    for rank, mine in enumerate(params):
        assert_arrays_close(mine, ref, rtol, f"worker {rank}")


# The nets: the MLP; a conv net (tests/models.py's, without BatchNorm: with it each worker's
# slice, and so what its BatchNorm normalises, changes with the worker count); and that net
# with BatchNorm summed over the job, which follows the worker count (131 samples: every
# last batch gives each worker one)
NETS = {None: {}, "conv": {"net": "conv"},
        "convbn sync": {"net": "convbn", "sync_batchnorm": True, "samples": 131}}


def nothing_left(cluster):
    for host in cluster.hosts:
        wait_until(lambda: not cluster.pids(host), timeout=30, message=f"{host} to be cleared")


@pytest.mark.parametrize("net", list(NETS))
def test_a_lost_host_shrinks_the_job_and_the_parameters_stay(launch, cluster, tmp_path, net):
    """The nets of NETS. The conv net's pooling is an average: with 3 workers the server adds their pushes in the order they arrive, and
    a max-pooling net turned that last-bit difference into 1e-4 in 6 runs of 11 (an argmax
    that flips), an average-pooling one ended within 2.4e-6 in each of 6."""
    first, second, third = cluster.hosts  # scheduler and server on first
    opts = NETS[net]
    job = fit(launch, cluster, tmp_path, "-H", hostfile(tmp_path, cluster.hosts), "-n", "2:3",
              "--max-restarts", 1, **opts)
    epochs_done(job, tmp_path, 1)
    cluster.crash(third)  # for good: sshd too
    assert job.wait(timeout=240) == 0, job.err
    assert f"gluondist: host {third} lost; restarting the job (1 of 1) with 2 workers (was 3)" \
        in job.err
    like_one_process(tmp_path, 2, 96, opts)  # 3 x 32 at the first start
    nothing_left(cluster)


def discovery(tmp_path, hosts):
    """A --host-discovery script that lists the hosts of ``tmp_path/listing``, which lists
    ``hosts`` until :func:`hostfile` writes it again."""
    listing = hostfile(tmp_path, hosts, "listing")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\nsed 's/ slots=/:/' {listing}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("net", list(NETS))
def test_a_discovered_host_grows_the_job_at_an_epoch_end(launch, cluster, tmp_path, net):
    """The nets of NETS."""
    script = discovery(tmp_path, cluster.hosts[:2])
    opts = NETS[net]
    job = fit(launch, cluster, tmp_path, "--host-discovery", script, "-n", "2:3",
              "--max-restarts", 0, grow_at=2, **opts)  # the 2 workers wait in epoch 2
    epochs_done(job, tmp_path, 1)
    hostfile(tmp_path, cluster.hosts, "listing")
    appeared = time.monotonic()
    assert job.wait(timeout=240) == 0, job.err
    assert "the job grows to 3 workers (was 2) after the workers' next checkpoint" in job.err
    assert "gluondist: growing the job to 3 workers (was 2)" in job.err
    print(f"\nmeasured: host listed -> job ended: {time.monotonic() - appeared:.1f}s")
    like_one_process(tmp_path, 3, 64, opts)  # 2 x 32 at the first start
    nothing_left(cluster)


def at_step_checkpoint(job, tmp_path, epoch, batch):
    """Until the newest checkpoint is the one after ``batch`` batches of ``epoch``."""
    from gluondist import checkpoint

    def there():
        assert job.proc.poll() is None, job.wait()
        latest = checkpoint.load_latest(tmp_path / "ckpt")
        return latest is not None and (latest.epoch, latest.batch) >= (epoch, batch) \
            and latest.batch is not None
    wait_until(there, timeout=180, interval=0.1, message=f"epoch {epoch + 1}, batch {batch}")


def test_a_host_lost_mid_epoch_shrinks_from_the_step_checkpoint(launch, cluster, tmp_path):
    """8 per worker: 129 samples in global batches of 24, 6 batches an epoch, a step
    checkpoint every 2 updates (after batches 2 and 4 of each epoch). The host goes right
    after the checkpoint of batch 2 of epoch 2; the 2 workers left can end one update more at
    most (the lost one's push is missing), so the job resumes mid-epoch, at batch 2 or 4."""
    first, second, third = cluster.hosts
    job = fit(launch, cluster, tmp_path, "-H", hostfile(tmp_path, cluster.hosts), "-n", "2:3",
              "--max-restarts", 1, batch=8, every=2)
    at_step_checkpoint(job, tmp_path, 1, 2)
    cluster.crash(third)
    assert job.wait(timeout=240) == 0, job.err
    assert f"gluondist: host {third} lost; restarting the job (1 of 1) with 2 workers (was 3)" \
        in job.err
    said = re.findall(r"fit: resuming from \S+ in epoch 2 of 5, after its batch (\d) of 6", job.out)
    assert said in (["2"], ["4"]), job.out
    like_one_process(tmp_path, 2, 24)  # 3 x 8 at the first start
    nothing_left(cluster)


def test_a_discovered_host_grows_the_job_at_the_next_step_checkpoint(launch, cluster,
                                                                      tmp_path):
    """2 x 8: 9 batches an epoch, a step checkpoint every 2 updates of the run. The workers
    wait at the start of epoch 3 (updates 18 done) for the ask, so the grow comes at the
    checkpoint after its batch 2, not at its end."""
    script = discovery(tmp_path, cluster.hosts[:2])
    job = fit(launch, cluster, tmp_path, "--host-discovery", script, "-n", "2:3",
              "--max-restarts", 0, batch=8, every=2, grow_at=2)
    epochs_done(job, tmp_path, 1)
    hostfile(tmp_path, cluster.hosts, "listing")
    assert job.wait(timeout=240) == 0, job.err
    assert "gluondist: growing the job to 3 workers (was 2)" in job.err
    assert "[worker 0] fit: stopping after the checkpoint of epoch 3, batch 2: the launcher " \
           "restarts the job on the hosts it finds then, which resumes from it" in job.out
    assert re.search(r"\[worker 0\] fit: resuming from \S+ in epoch 3 of 5, after its batch 2 "
                     r"of 9 \(resume=False starts over\)", job.out), job.out
    like_one_process(tmp_path, 3, 16)  # 2 x 8 at the first start
    nothing_left(cluster)


def test_below_min_nothing_starts_and_one_line_says_why(launch, cluster, tmp_path):
    first, second, third = cluster.hosts
    cluster.cut(second)
    cluster.crash(third)
    job = fit(launch, cluster, tmp_path, "-H", hostfile(tmp_path, cluster.hosts), "-n", "2:3")
    assert job.wait(timeout=60) == 2
    assert job.err.strip().count("\n") == 0, job.err
    assert job.err.startswith(f"gluondist: error: cannot start: -n 2:3 needs at least 2 "
                              f"worker(s); the "
                              f"hosts that answer ({first}:1) hold 1; left out (unreachable, or "
                              f"failing its check): {second}, {third}")
    assert not list(tmp_path.glob("params.*")) and not cluster.pids(first)


@pytest.mark.parametrize("outage", [10, 16])
def test_an_outage_is_survived_or_a_named_lost_host(launch, cluster, tmp_path, outage):
    """10 s: under ssh's keepalive; 16 s: inside it (ssh gives up 15-20 s into an outage, the
    remote side's silence is 25 s). e2e/test_netns.py has a 4 s blip, an outage just past
    ssh's give-up and a link cut for good."""
    first, second = cluster.hosts[:2]
    job = fit(launch, cluster, tmp_path, "-H", hostfile(tmp_path, [first, second]), "-n", 2)
    epochs_done(job, tmp_path, 1)
    cluster.cut(second)
    time.sleep(outage)
    cluster.heal(second)
    code = job.wait(timeout=240)
    print(f"\nmeasured: a {outage}s outage ended the job with {code}")
    assert "SIGTERM" not in job.err and "143" not in job.err, job.err
    if code == 0:
        like_one_process(tmp_path, 2, 64)
    else:
        assert code == LOST_EXIT, job.err
        assert f"gluondist: lost the connection to host {second}" in job.err
    nothing_left(cluster)
