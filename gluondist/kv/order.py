"""The order an exchange sends a step's gradients in (:class:`Order`), chosen by the job.

Backward makes the gradients last layer first, and the next forward pass needs the weights
first layer first. Chunks take the staging slots in the order they are issued, so that order
decides which gradient is on the wire when. Sent in backward's order, each gradient goes as
soon as it is made, but the first layers' sums land last and the next forward pass waits for
the whole exchange. Sent in forward order, the next pass starts on the layers that have
landed, but the links idle while backward makes the first layers' gradients, which it makes
last. So the step's first chunks go in backward's order, as many as the links carry while
backward runs (the head: the parameters, in backward's order, until twice backward's time over
the exchange's time alone of the chunked bytes, up to all of them), and the rest in forward
order, as P3 and ByteScheduler send by priority. Parameters sent whole or fused take no slot:
they go once made, in the same sequence.

The two times are measured once, at :data:`TIMED` steps from :data:`MEASURE_AT` on, of an
exchange on the job's kvstore: those steps wait for backward to end before they send anything,
then for their sums (and the step before them for its sums, so that what they wait for is
their own passes). Every worker gets every worker's times (an allgather), so every worker
sends in the same order. Until then, and where nothing is measured (outside a job, dist_async,
a kvstore of ``mx.kv.create``, no chunked gradient), gradients go in backward's order.

Measured (docs/measured.md): on ResNet-18 v1 over 200 Mbit/s links with 4 workers the job
chose a head of 12% (one layer, 21% of the bytes) and its epochs were 1.1% shorter than in
backward's order throughout; on MobileNet 1.0 at 1 Gbit/s, where the passes fill the cores,
the order made no difference.
"""
from __future__ import annotations

import logging
import time
from typing import List, Optional, Sequence, Tuple

from .._mx import mx
from .node import NODE

log = logging.getLogger(__name__)

MEASURE_AT = 3  # the first step timed: the first two also build the graph and set up keys
TIMED = 2  # steps timed
# The head carries the bytes of twice backward's time: one too short idles the links until
# backward has made the first layers' gradients, one too long delays the next forward pass
# only by the forward pass of the layers it holds
MARGIN = 2.0


class Order:
    """The order of an exchange's trained parameters, given each one's chunked ``sizes``
    (elements; 0 for one sent whole or fused)."""

    def __init__(self, sizes: Sequence[int], measured: bool):
        self.sizes = list(sizes)
        self.measured = measured and sum(self.sizes) > 0  # whether this exchange measures
        self.head: Optional[float] = None  # the head's share of the chunked bytes (None: all)
        self.steps = 0
        self._start = 0.0
        self._times: List[List[float]] = []  # each timed step's backward and exchange

    def of(self, trained: List[Tuple[int, object]]) -> list:
        """``trained`` (index, parameter) in the order to send them: backward's (reversed)
        until the head's share of the chunked elements, then forward's."""
        back = list(reversed(trained))
        total = sum(self.sizes[i] for i, _ in back)
        if self.head is None or self.head >= 1 or not total:
            return back
        got, n = 0, 0
        while n < len(back) and got < self.head * total:
            got += self.sizes[back[n][0]]
            n += 1
        return back[:n] + back[n:][::-1]

    def timing(self, grads: Sequence) -> bool:
        """At the start of a step's exchange: whether :meth:`timed` is to end it (the step
        before the timed ones ends with its sums landed, so that what a timed one waits for
        is its own passes). If this step is timed, wait for backward to make every one of
        ``grads`` (arrays), and keep how long that took."""
        self.steps += 1
        if not self.measured or not MEASURE_AT - 1 <= self.steps < MEASURE_AT + TIMED:
            return False
        if self.steps >= MEASURE_AT:
            start = time.perf_counter()
            for grad in grads:
                grad.wait_to_read()
            self._start = time.perf_counter()
            self._times.append([self._start - start])
        return True

    def timed(self) -> None:
        """At the end of such a step's exchange: wait for its sums; after the last timed
        step, choose the head from every worker's times (the slowest backward over the
        slowest exchange)."""
        mx.nd.waitall()
        if self.steps < MEASURE_AT:
            return
        self._times[-1].append(time.perf_counter() - self._start)
        if len(self._times) < TIMED:
            return
        # a step's backward may have been waited for already (fit's time split samples a
        # step, and a loop may read its loss): the longer one is the worker's backward
        backward = max(b for b, _ in self._times)
        exchange = sum(e for _, e in self._times) / TIMED
        table = NODE.allgather([backward, exchange])
        backward_s, exchange_s = float(table[:, 0].max()), float(table[:, 1].max())
        self.head = min(1.0, MARGIN * backward_s / exchange_s) if exchange_s > 0 else 1.0
        NODE.send_order = {"backward_s": backward_s, "exchange_s": exchange_s, "head": self.head}
        said = log.info if NODE.rank() == 0 else log.debug
        said("gluondist: backward %.0f ms, the exchange alone %.0f ms: the first %.0f%% of the "
             "chunked bytes go in backward's order, the rest in forward order",
             backward_s * 1e3, exchange_s * 1e3, self.head * 100)
