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
exchange on the job's kvstore: those steps wait for backward's gradients before they send
anything (backward's time: from the first gradient made to the last, the window the pushes can
overlap), then for every worker, then for their sums (the exchange's time alone); the step
before them ends with its sums landed, so that what they wait for is their own passes. Every
worker gets every worker's times (an allgather), so every worker sends in the same order.
Until then, and where nothing is measured (outside a job, a kvstore of ``mx.kv.create``, no
chunked gradient), gradients go in backward's order; dist_async sends them in the parameters'
order.
``GLUONDIST_BACKWARD_SHARE`` gives the head's share instead (1: backward's order throughout),
and then no step is timed.

Measured (docs/measured.md), before backward's time was the window from the first gradient:
on ResNet-18 v1 over 200 Mbit/s links with 4 workers the job chose a head of 12% (one layer,
21% of the bytes), and its median epoch was 1.0% shorter than in backward's order throughout
(-0.1% to 1.9% by round); on MobileNet 1.0 at 1 Gbit/s, where the passes fill the cores, fixed
heads of a quarter and a half made no difference.
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
    (bytes; 0 for one sent whole or fused). ``share``: the head's share, fixed
    (GLUONDIST_BACKWARD_SHARE); else it is measured where ``measured``."""

    def __init__(self, sizes: Sequence[int], measured: bool, share: Optional[float] = None):
        self.sizes = list(sizes)
        # whether this exchange times steps (a probe's or a bench's trainer does not)
        self.measured = measured and share is None and sum(self.sizes) > 0
        self.head: Optional[float] = share  # the head's share of the chunked bytes (None: all)
        self.steps = 0
        self._start = 0.0
        self._times: List[List[float]] = []  # each timed step's backward and exchange
        self._made: dict = {}  # the order made for a (trained indices, head)

    def of(self, trained: List[Tuple[int, object]]) -> list:
        """``trained`` (index, parameter) in the order to send them: backward's (reversed)
        until the head's share of the chunked bytes, then forward's."""
        indices = tuple(i for i, _ in trained)
        n = self._made.get((indices, self.head))
        if n is None:
            n = self._made[indices, self.head] = self._split(indices[::-1])[0]
        back = trained[::-1]
        return back[:n] + back[n:][::-1]

    def _split(self, back: Sequence[int]) -> Tuple[int, float]:
        """How many of ``back`` (indices, backward's order) form the head, and the share of
        the chunked bytes they hold."""
        total = sum(self.sizes[i] for i in back)
        if self.head is None or self.head >= 1 or not total:
            return len(back), 1.0
        got, n = 0, 0
        while n < len(back) and got < self.head * total:
            got += self.sizes[back[n]]
            n += 1
        return n, got / total

    def timing(self, trained: List[Tuple[int, object]]) -> bool:
        """At the start of a step's exchange: whether :meth:`timed` is to end it (the step
        before the timed ones ends with its sums landed, so that what a timed one waits for
        is its own passes). If this step is timed, wait for backward's gradients: the time
        from the first one made (the last parameter's) to the last is the window the pushes
        can overlap; then every worker waits for the others, so that the exchange's time is
        its own, not another worker's passes."""
        self.steps += 1
        if not self.measured or not trained or \
                not MEASURE_AT - 1 <= self.steps < MEASURE_AT + TIMED:
            return False
        if self.steps >= MEASURE_AT:
            last = trained[-1][1]  # backward makes its gradient first
            for grad in last.list_grad():
                grad.wait_to_read()
            first = time.perf_counter()
            for _, param in trained:
                for grad in param.list_grad():
                    grad.wait_to_read()
            self._times.append([time.perf_counter() - first])
            NODE.barrier()
            self._start = time.perf_counter()
        return True

    def timed(self, trained: List[Tuple[int, object]]) -> None:
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
        share = self._split([i for i, _ in reversed(trained)])[1]
        NODE.send_order = {"backward_s": backward_s, "exchange_s": exchange_s,
                           "head": self.head, "share": share}
        said = log.info if NODE.rank() == 0 else log.debug
        said("gluondist: backward %.0f ms, the exchange alone %.0f ms: the first %.0f%% of the "
             "chunked bytes go in backward's order, the rest in forward order; "
             "GLUONDIST_BACKWARD_SHARE overrides", backward_s * 1e3, exchange_s * 1e3,
             share * 100)
