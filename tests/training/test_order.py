"""The order an exchange sends its gradients in (gluondist.kv.order): backward's for the
head, then forward's, and nothing timed outside a job. The timed step runs in a real job:
e2e/test_chunk_jobs.py (every worker the same order, bit-equal to backward's order)."""
import mxnet as mx
import numpy as np
import pytest

from gluondist import kvstore
from gluondist.kv import order


def trained(n):
    return [(i, f"p{i}") for i in range(n)]


def test_backward_order_until_measured_or_when_all_of_it_overlaps_backward():
    o = order.Order([0, 10, 10, 10, 0], measured=True)
    assert [i for i, _ in o.of(trained(5))] == [4, 3, 2, 1, 0]
    o.head = 1.0  # backward as long as the exchange alone: everything in backward's order
    assert [i for i, _ in o.of(trained(5))] == [4, 3, 2, 1, 0]


def test_the_head_in_backward_order_then_the_rest_in_forward_order():
    sizes = [0, 40, 20, 20, 0, 20, 0]  # chunked bytes; 0: whole or fused
    o = order.Order(sizes, measured=True)
    o.head = 0.25  # 25 of 100: the head ends at the first parameter that reaches it
    assert [i for i, _ in o.of(trained(7))] == [6, 5, 4, 3, 0, 1, 2]
    o.head = 0.01
    assert [i for i, _ in o.of(trained(7))] == [6, 5, 0, 1, 2, 3, 4]
    # parameters not trained now are not in the list, and their sizes play no part
    o.head = 0.5
    assert [i for i, _ in o.of([(1, "a"), (2, "b"), (5, "c")])] == [5, 2, 1]


def test_nothing_is_timed_without_a_chunked_gradient_or_outside_a_job():
    grads = [mx.nd.ones((2,))]
    o = order.Order([0, 0], measured=True)
    assert not o.measured
    assert not any(o.timing(grads) for _ in range(order.MEASURE_AT + 2))
    assert o.head is None
    # one process: a trainer's exchange has no kvstore, so no order to time
    p = mx.gluon.Parameter("w", shape=(300, 300))
    p.initialize(ctx=mx.cpu())
    trainer = kvstore.make_trainer([p], "sgd", {"learning_rate": 0.1})
    assert not trainer.exchange.order.measured


class Grads:
    """A parameter of the order's list: its gradient, one device."""

    def __init__(self):
        self.grad = mx.nd.ones((4,))

    def list_grad(self):
        return [self.grad]


def timed_steps(monkeypatch, table, sizes=(0, 100, 100, 100)):
    """An order run through 6 steps of an exchange, ``table`` standing for the gathered times:
    the steps it timed, the barriers it called, what it gathered, and the order."""
    calls = {"barriers": 0, "gathered": []}
    monkeypatch.setattr(order.NODE, "barrier", lambda: calls.__setitem__(
        "barriers", calls["barriers"] + 1))
    monkeypatch.setattr(order.NODE, "allgather", lambda values: (
        calls["gathered"].append(list(values)), np.array(table))[1])
    monkeypatch.setattr(order.NODE, "send_order", None)
    o = order.Order(list(sizes), measured=True)
    trained = [(i, Grads()) for i in range(len(sizes))]
    timed = []
    for step in range(1, 7):
        if o.timing(trained):
            timed.append(step)
            o.timed(trained)
    return o, timed, calls


def test_steps_3_and_4_are_timed_after_step_2_lands_and_every_worker_gets_the_times(
        monkeypatch):
    o, timed, calls = timed_steps(monkeypatch, [[0.1, 1.0], [0.3, 2.0]])
    assert timed == [2, 3, 4]  # 2 only ends with its sums landed
    assert calls["barriers"] == 2 and len(calls["gathered"]) == 1
    assert len(calls["gathered"][0]) == 2 and min(calls["gathered"][0]) >= 0
    # the slowest backward (0.3 s) over the slowest exchange (2.0 s), twice: 30%
    assert o.head == pytest.approx(0.3)
    assert [i for i, _ in o.of([(i, None) for i in range(4)])] == [3, 0, 1, 2]
    assert order.NODE.send_order["share"] == pytest.approx(1 / 3)  # one parameter of three


@pytest.mark.parametrize("table,head", [([[2.0, 1.0]], 1.0), ([[0.5, 0.0]], 1.0),
                                        ([[0.0, 1.0]], 0.0)])
def test_the_head_is_all_of_it_when_backward_outlasts_the_exchange(monkeypatch, table, head):
    o, _, _ = timed_steps(monkeypatch, table)
    assert o.head == head


def test_a_given_share_times_no_step(monkeypatch):
    o = order.Order([0, 100, 100], measured=True, share=0.0)
    assert not o.measured and o.head == 0.0
    assert [i for i, _ in o.of([(i, None) for i in range(3)])] == [0, 1, 2]  # forward order
    assert not any(o.timing([(0, Grads())]) for _ in range(6))
