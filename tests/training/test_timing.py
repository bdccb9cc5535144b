"""fit's time split (gluondist.training.timing): which batches stall to be timed, and how an
epoch's time is divided."""
from gluondist.training import timing


def sampled(steps: int, epochs: int, every: int = 10) -> list:
    """The (epoch, batch) pairs a run of ``epochs`` of ``steps`` batches times phase by phase."""
    clock, out = None, []
    for epoch in range(epochs):
        clock = timing.EpochClock(steps, every, before=clock)
        for batch in range(steps):
            if clock.sample() is not None:
                clock.lap("compute")
                out.append((epoch, batch))
    return out


def test_short_epochs_stall_one_batch_in_ten_of_the_run_not_one_an_epoch():
    assert sampled(4, 10) == [(0, 2), (3, 0), (5, 2), (8, 0)]
    assert sampled(1, 25) == [(0, 0), (10, 0), (20, 0)]


def test_long_epochs_sample_the_middle_of_the_first_ten_then_every_tenth():
    assert sampled(25, 2) == [(0, 5), (0, 15), (1, 0), (1, 10), (1, 20)]


def test_an_epoch_is_split_by_its_own_samples_else_by_the_runs(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])

    def batch(clock, compute, sync):
        timed = clock.sample()
        if timed is not None:
            now[0] += compute
            timed.lap("compute")
            now[0] += sync
            timed.lap("sync")

    first = timing.EpochClock(1, every=2)  # one batch an epoch, every other one timed
    batch(first, 3.0, 1.0)
    assert first.split(8.0) == {"data_seconds": 0.0, "compute_seconds": 6.0,
                                "sync_seconds": 2.0}
    second = timing.EpochClock(1, every=2, before=first)
    batch(second, 5.0, 5.0)  # not timed
    assert second.samples == 0
    assert second.split(4.0) == {"data_seconds": 0.0, "compute_seconds": 3.0,
                                 "sync_seconds": 1.0}
    third = timing.EpochClock(1, every=2, before=second)
    batch(third, 1.0, 1.0)  # its own proportion, not the run's (4 to 2)
    assert third.split(4.0) == {"data_seconds": 0.0, "compute_seconds": 2.0,
                                "sync_seconds": 2.0}
