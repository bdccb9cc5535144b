"""The chunk size a job chooses (gluondist.kv.tuning): the rule, what is probed, and that
nothing is probed outside a synchronous job; the probe's measurements with the allgather and
the clock stubbed. The probe itself runs in real jobs:
e2e/test_models.py (every worker chooses the same), benchmarks/peers.py (what it chooses on
shaped links)."""
import mxnet as mx
import numpy as np
import pytest

from gluondist import kvstore
from gluondist.kv import tuning
from gluondist.kv.node import NODE

KIB = 1024


@pytest.mark.parametrize("seconds,chosen", [
    ([0.020, 0.026, 0.034, 0.045], 512 * KIB),  # one host: the fewest messages
    ([0.556, 0.494, 0.485, 0.480], 128 * KIB),  # a full queue: within 2% of 64 KiB's
    ([0.514, 0.503, 0.488, 0.474], 64 * KIB),  # 128 KiB 3% slower: not within
    ([0.408, 0.404, 0.400, 0.400], 512 * KIB),  # a tie within 2%: the largest
])
def test_the_largest_chunk_within_2_percent_of_the_fastest_is_chosen(seconds, chosen):
    assert tuning.choose(seconds) == chosen


def param(name, shape, grad_req="write", stype="default"):
    p = mx.gluon.Parameter(name, shape=shape, grad_req=grad_req, grad_stype=stype)
    p.initialize(ctx=mx.cpu())
    return p


def test_the_probe_is_what_the_smallest_chunk_would_cut_up_to_8_mib():
    small = [param("bias", (100,)), param("w", (64, 256))]  # 64 KiB exactly: not cut
    assert tuning.probe_bytes(small) == 0
    big = param("big", (1000, 300))  # 1.2 MB
    assert tuning.probe_bytes(small + [big]) == 1_200_000
    assert tuning.probe_bytes([param("frozen", (1000, 300), grad_req="null")]) == 0
    assert tuning.probe_bytes([param("rows", (1000, 300), stype="row_sparse")]) == 0
    assert tuning.probe_bytes([param(f"huge{i}", (1000, 1000)) for i in range(3)]) == 8 << 20


@pytest.mark.parametrize("kind", [None, "local", "device"])
def test_outside_a_job_nothing_is_probed_and_the_default_stands(kind):
    big = param("big", (1000, 300))
    trainer = kvstore.make_trainer([big], "sgd", kvstore=kind)
    assert NODE.chunk_probe is None and tuning.chosen() is None
    assert tuning.chunk_bytes(trainer.exchange.kv, [big], None, make=None) == \
        kvstore.CHUNK_BYTES
    assert trainer.exchange.chunks == [[(0, 0)]]  # whole: no kvstore cuts in one process


class DistKV:
    type, rank = "dist_sync", 0


class Probed(Exception):
    pass


def probe(params, chunk_bytes):
    raise Probed(chunk_bytes)


def test_a_choice_is_reused_unless_a_trainer_would_cut_more_than_its_probe(monkeypatch):
    kv = DistKV()
    monkeypatch.setattr(NODE, "kv", kv)
    monkeypatch.setattr(NODE, "chunk_probe", {"bytes": 1_200_000, "seconds": dict(zip(
        tuning.CANDIDATES, [0.514, 0.503, 0.488, 0.474]))})  # 64 KiB's the choice
    assert tuning.chunk_bytes(kv, [param("big", (1000, 300))], None, probe) == 64 * KIB
    with pytest.raises(Probed):  # 1.6 MB to cut: the 1.2 MB probe's choice is not reused
        tuning.chunk_bytes(kv, [param("bigger", (1000, 400))], None, probe)


def test_a_kvstore_made_by_mxnet_itself_is_not_probed(monkeypatch):
    """gluondist's sums, which give every worker the same table, run on its own kvstore: on
    another one each worker would choose from its own measurements alone."""
    monkeypatch.setattr(NODE, "kv", None)
    assert tuning.chunk_bytes(DistKV(), [param("big", (1000, 300))], None, probe) == \
        kvstore.CHUNK_BYTES


@pytest.mark.parametrize("one_sum,sums", [
    (0.020, 4),  # one host: as many as MOST_SUMS
    (0.095, 4),  # 8 MiB on 1 Gbit/s links, 3 workers
    (0.150, 3),
    (0.300, 1),  # 200 Mbit/s links: one sum, as before
    (0.500, 1),
    (2.000, 1),  # never none
    (0.0, 4),
])
def test_a_quick_sum_is_measured_several_times_back_to_back(one_sum, sums):
    assert tuning.sums_per_measurement(one_sum) == sums


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Summing:
    """A probe trainer whose sum takes ``seconds`` on ``clock``, counted."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds, self.sums = clock, seconds, 0
        self.exchange = type("E", (), {"order": type("O", (), {"measured": True})()})()

    def allreduce_grads(self):
        self.sums += 1
        self.clock.now += self.seconds


@pytest.mark.parametrize("one_sum,other,sums", [
    (0.1, 0.05, 4),  # the other worker faster: this one's count
    (0.1, 0.5, 1),  # the other slower: its count, not this one's
    (0.5, 0.1, 1),
])
def test_the_probe_measures_each_size_in_as_many_sums_as_the_slowest_first_pass_asks(
        monkeypatch, one_sum, other, sums):
    """After the unmeasured pass every worker takes the slowest worker's count (the
    allgather), and a measurement's time is per sum."""
    clock, made, gathered = Clock(), [], []
    monkeypatch.setattr(tuning, "time", type("T", (), {"perf_counter": clock}))
    monkeypatch.setattr(tuning.mx.nd, "waitall", lambda: None)

    def allgather(x):  # this worker's times and another's
        gathered.append(len(x))
        return np.stack([x, np.full_like(x, other)])
    monkeypatch.setattr(NODE, "allgather", allgather)

    def make(params, chunk_bytes):
        made.append(Summing(clock, one_sum))
        return made[-1]
    seconds, counted = tuning.measure(1 << 20, make)
    assert counted == sums
    assert [t.sums for t in made] == [1 + tuning.ROUNDS * sums] * len(tuning.CANDIDATES)
    assert seconds == pytest.approx([max(one_sum, other)] * len(tuning.CANDIDATES))
    # the same calls on every worker: the first pass's times, then the measured table
    assert gathered == [len(tuning.CANDIDATES), tuning.ROUNDS * len(tuning.CANDIDATES)]
    assert all(t.exchange.order.measured is False for t in made)
