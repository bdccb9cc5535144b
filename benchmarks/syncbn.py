"""What BatchNorm synchronised over the job (fit's ``sync_batchnorm=True``, gluondist.syncbn)
costs on real nets: a 2-worker, 1-server dist_sync job on this machine trains each model
through ``fit`` with and without it, the two alternating, and the median epoch of each is
compared. The nets are the model zoo's (tests/models.py), 3x32x32 inputs, 16 samples a worker
a step, 8 steps an epoch, 3 epochs, the first left out; one OpenMP thread a worker (the
launcher's default on 2 cores). With ``--link RATE`` (as root) each worker runs on a namespace
host of its own (tests/netns.py; the server on the first), over ssh, links at RATE.

    python benchmarks/syncbn.py [--models resnet18_v1 mobilenetv2_0.25] [--repeats 5]
                                [--link 1gbit] [--json FILE]
"""
import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fusion import arguments, compare, job_epoch  # noqa: E402
from fusion import worker as fusion_worker  # noqa: E402

SIZES = (16, 8, 3)  # a worker's batch, the steps of an epoch, the epochs


def worker(model: str, arm: str, out: str) -> None:
    """One worker of the job: ``model`` through fit, with sync_batchnorm (``arm`` ``sync``)
    or without; worker 0 writes its epoch times."""
    fusion_worker(model, out, SIZES, sync_batchnorm=arm == "sync")


def main(argv=None):
    args = arguments(__doc__, ["resnet18_v1", "mobilenetv2_0.25"], 3, argv, link=True)
    if args.worker:
        return worker(*args.worker)
    with contextlib.ExitStack() as stack:
        launch = hosts(stack, args.link) if args.link else ()
        compare(args, argv, "syncbn.py", SIZES, ("local", "sync"),
                lambda model, arm, scratch: job_epoch(os.path.abspath(__file__), [model, arm],
                                                      scratch, launch=launch),
                lambda local, sync: f"{sync:.3f} s synchronised, {local:.3f} s each worker's "
                                    f"own: {sync / local:.2f}x")


def hosts(stack, rate: str) -> tuple:
    """gluondist launch's options for two namespace hosts linked at ``rate`` (removed when
    ``stack`` closes)."""
    from peers import link_hosts, ssh_launch
    cluster = link_hosts(stack, 2, rate)
    return tuple(ssh_launch(cluster, cluster.hosts))


if __name__ == "__main__":
    main()
