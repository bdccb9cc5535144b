"""The order an exchange sends its gradients in (gluondist.kv.order): backward's for the
head, then forward's, and nothing timed outside a job. The timed step runs in a real job:
e2e/test_chunk_jobs.py (every worker the same order, bit-equal to backward's order)."""
import mxnet as mx

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
    sizes = [0, 40, 20, 20, 0, 20, 0]  # chunked elements; 0: whole or fused
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
