"""fit's time split (gluondist.training.timing): which batches stall to be timed, and how an
epoch's time is divided."""
from gluondist.training import timing


def sampled(steps: int, epochs: int, every: int = 10) -> list:
    """The (epoch, batch) pairs a run of ``epochs`` of ``steps`` batches times phase by phase."""
    clock, out = None, []
    for epoch in range(epochs):
        clock = timing.EpochClock(steps, every, before=clock)
        for batch in range(steps):
            if clock.sample(batch) is not None:
                clock.lap("compute")
                out.append((epoch, batch))
    return out


def test_short_epochs_stall_one_batch_in_ten_of_the_run_not_one_an_epoch():
    assert sampled(4, 10) == [(0, 2), (3, 0), (5, 2), (8, 0)]
    assert sampled(1, 25) == [(0, 0), (10, 0), (20, 0)]


def test_long_epochs_sample_the_middle_of_the_first_ten_then_every_tenth():
    assert sampled(25, 2) == [(0, 5), (0, 15), (1, 0), (1, 10), (1, 20)]


def test_an_epoch_without_a_sample_is_split_in_the_runs_proportion():
    first = timing.EpochClock(4, 10)
    first.sampled = {"compute": 3.0, "sync": 1.0}
    second = timing.EpochClock(4, 10, before=first)
    second.data = 2.0
    assert second.split(10.0) == {"data_seconds": 2.0, "compute_seconds": 6.0,
                                  "sync_seconds": 2.0}
