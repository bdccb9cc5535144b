"""``gluondist bench kvstore``: measure a dist_sync job's communication for several server
counts and layouts, next to the cost model's prediction, and recommend a count and a layout.

Each row is a real job started through the launcher's one path (the same placement,
supervision and failure reports as ``gluondist launch``); its workers run ``worker.py``, which
communicates through the same trainer path as ``fit`` (gradients in chunks). The model
(model.py) counts the bytes on every link for the placement the job really ran (its plan) and
MXNet's placement of the keys, calibrated once per bench by the first row whose bytes cross a
link; a raw TCP probe between two of the job's hosts gives the link bound each row's
efficiency is measured against.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from .. import envvars as ev, wire
from ..kv import compression as cmp
from ..kv.chunks import bigarray_bound_from_env, chunk_bounds, chunk_count, fused_runs
from .model import (DEFAULT_BIGARRAY_BOUND, WIRE, Layout, calibrate, key_parts, link_bytes,
                    predict)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
WITHIN = 0.10  # a recommendation is the fewest servers within this of the best step time


def key_sizes(mbytes: float, keys: int) -> List[int]:
    """float32 elements per key: ``mbytes`` split as evenly as possible into ``keys`` arrays."""
    total = max(keys, int(mbytes * 2 ** 20 / 4))
    return [total // keys + (1 if i < total % keys else 0) for i in range(keys)]


def keys_needed(sizes: Sequence[int], chunk_sizes: Sequence[int], trainers_each: int) -> int:
    """The kvstore keys a bench worker's trainers take: ``trainers_each`` trainers (one per
    compression) for each of ``chunk_sizes``, each a key per chunk of each of ``sizes``."""
    return trainers_each * sum(chunk_count(n, 4, c) for c in chunk_sizes for n in sizes)


def sent_sizes(sizes: Sequence[int], chunk_bytes: int) -> List[int]:
    """The arrays as the kvstore sees them, as the trainer sends them: each cut in chunks, and
    runs of small whole ones fused up to a chunk's size (gluondist.kv.fusion; the model places
    the sent arrays on consecutive keys, the trainer spreads the fused ones alike)."""
    parts = [[b - a for a, b in chunk_bounds(n, 4, chunk_bytes)] for n in sizes]
    runs = {run[0]: run for run in fused_runs([4 * n for n in sizes],
                                              ["float32" if len(p) == 1 else None
                                               for p in parts], chunk_bytes)} \
        if chunk_bytes > 0 else {}
    sent, i = [], 0
    while i < len(sizes):
        run = runs.get(i, [i])
        sent += [sum(sizes[m] for m in run)] if len(run) > 1 else parts[i]
        i = run[-1] + 1
    return sent


def busiest_share(sizes: Sequence[int], servers: int,
                  bound: int = DEFAULT_BIGARRAY_BOUND) -> float:
    """The fraction of the elements that the busiest server holds (model.key_parts)."""
    load = [0.0] * servers
    for parts in key_parts(sizes, servers, bound):
        for server, elements in parts:
            load[server] += elements
    return max(load) / sum(sizes)


@dataclass(frozen=True)
class Row:
    servers: int
    layout: str  # colocated | dedicated | mixed | one host
    step_s: float
    predicted_s: float
    worker_mb: float  # megabytes each worker moves per step (push + pull)
    server_mb: float  # megabytes the busiest server moves per step (all workers' push + pull)
    link_bound_s: Optional[float]  # the busiest link's bytes at the probe's raw TCP rate
    unchunked_s: Optional[float] = None  # the same bytes, each array sent whole
    compression: str = "none"  # fit's compression= the row's trainer used (WIRE's keys)
    chunk_bytes: int = 0  # GLUONDIST_CHUNK_BYTES the row's trainer used

    @property
    def error(self) -> float:
        return self.predicted_s / self.step_s - 1

    @property
    def efficiency(self) -> Optional[float]:
        return None if self.link_bound_s is None else self.link_bound_s / self.step_s

    def as_dict(self) -> dict:
        return {"servers": self.servers, "layout": self.layout, "step_s": self.step_s,
                "predicted_step_s": self.predicted_s, "model_error": self.error,
                "link_bound_s": self.link_bound_s, "link_efficiency": self.efficiency,
                "unchunked_step_s": self.unchunked_s, "worker_mb_per_step": self.worker_mb,
                "busiest_server_mb_per_step": self.server_mb, "compression": self.compression,
                "chunk_bytes": self.chunk_bytes}


@dataclass(frozen=True)
class Measured:
    """One job's figures: where it ran and what worker 0 reported."""
    layout: Layout
    step_s: float
    unchunked_s: Optional[float]
    tcp_bytes_per_s: Optional[float]
    compression: str = "none"
    chunk_bytes: Optional[int] = None  # None: the table's


def rows(measured: Sequence[Measured], sizes: Sequence[int], chunk_bytes: int,
         bound: int = DEFAULT_BIGARRAY_BOUND) -> List[Row]:
    """The table: the model calibrated, per chunk size, by the first row of that size whose
    bytes cross a link (rows on one host are predicted to take the first such row's time):
    a chunk size is a schedule of its own, whose rate the model cannot derive from another's
    (on slow links 512 KiB chunks lose packets where 64 KiB ones do not). Each row's bytes
    are those of its compression (WIRE), in its chunks (``chunk_bytes`` unless it has its
    own)."""
    chunks = [chunk_bytes if m.chunk_bytes is None else m.chunk_bytes for m in measured]
    wires = [WIRE[m.compression] for m in measured]
    links = [link_bytes(m.layout, sent_sizes(sizes, c), pull, bound, push)
             for m, c, (push, pull) in zip(measured, chunks, wires)]
    rates, local = {}, {}
    for m, lk, chunk in zip(measured, links, chunks):
        if lk.busiest() > 0:
            rates.setdefault(chunk, calibrate(lk, m.step_s))
        else:
            local.setdefault(chunk, m.step_s)
    tcp = next((m.tcp_bytes_per_s for m in measured if m.tcp_bytes_per_s), None)
    table = []
    for m, lk, wire_bytes, chunk in zip(measured, links, wires, chunks):
        servers = len(m.layout.servers)
        kind = m.layout.kind if lk.busiest() > 0 else "one host"
        mb = sum(wire_bytes) * sum(sizes) / 2 ** 20  # push + pull
        table.append(Row(servers, kind, m.step_s,
                         predict(lk, rates.get(chunk, 0.0), local.get(chunk, 0.0)),
                         mb, mb * len(m.layout.workers) *
                         busiest_share(sent_sizes(sizes, chunk), servers, bound),
                         lk.bound() / tcp if tcp and lk.busiest() > 0 else None, m.unchunked_s,
                         m.compression, chunk))
    return table


def recommend(table: Sequence[Row], within: float = WITHIN) -> Row:
    """Among the rows of the first compression measured: for each server count and layout,
    the first chunk size measured unless another makes more than ``1 + within`` times its
    steps per second (then the fastest); of those, the one with the fewest servers within ``within`` of the best step
    time, servers on the workers' hosts preferred (they need no more hosts)."""
    table = [r for r in table if r.compression == table[0].compression]
    places: dict = {}
    for r in table:
        places.setdefault((r.servers, r.layout), []).append(r)
    picks = [_chunk_pick(sizes, within) for sizes in places.values()]
    best = min(r.step_s for r in picks)
    good = [r for r in picks if r.step_s <= best * (1 + within)]
    return min(good, key=lambda r: (r.servers, r.layout == "dedicated"))


def _chunk_pick(sizes: Sequence[Row], within: float) -> Row:
    """Of one place's rows (one per chunk size), the first unless another makes more than
    ``1 + within`` times its steps per second."""
    fastest = min(sizes, key=lambda r: r.step_s)
    return fastest if fastest.step_s * (1 + within) < sizes[0].step_s else sizes[0]


def advice(row: Row) -> str:
    where = {"dedicated": " on hosts of their own (--server-hosts)",
             "colocated": " on the workers' hosts", "mixed": " (as placed)"}.get(row.layout, "")
    return (f"recommended: -s {row.servers}{where} (the fewest servers within "
            f"{WITHIN:.0%} of the best step time)")


def compression_advice(table: Sequence[Row], chosen: Row, within: float = WITHIN) -> str:
    """Compress only where it is faster: the fastest compression at the recommended servers and
    layout, if it takes less than ``1 - within`` of the uncompressed step (else none)."""
    here = {r.compression: r for r in table if (r.servers, r.layout, r.chunk_bytes) ==
            (chosen.servers, chosen.layout, chosen.chunk_bytes)}
    if len(here) < 2 or "none" not in here:
        return ""
    base = here["none"]
    ratios = ", ".join(f"{c} {base.step_s / r.step_s:.2f}x" for c, r in here.items()
                       if c != "none")
    fastest = min(here.values(), key=lambda r: r.step_s)
    if fastest.compression != "none" and fastest.step_s < base.step_s * (1 - within):
        return (f"compression: {fastest.compression!r} (steps per second against none: "
                f"{ratios})")
    return (f"compression: none (steps per second against none: {ratios}; none is faster, "
            f"or within {within:.0%})")


def chunk_advice(table: Sequence[Row], chosen: Row, within: float = WITHIN) -> str:
    """With several chunk sizes measured: the recommended one (see recommend) and each one's
    steps per second against the first, at the recommended servers, layout and compression."""
    here = [r for r in table if (r.servers, r.layout, r.compression) ==
            (chosen.servers, chosen.layout, chosen.compression)]
    if len(here) < 2:
        return ""
    first = here[0]
    ratios = ", ".join(f"{_size(r.chunk_bytes)} {first.step_s / r.step_s:.2f}x"
                       for r in here[1:])
    if chosen is first:
        return (f"chunks: {_size(first.chunk_bytes)}, the first measured (steps per second "
                f"against it: {ratios}; no other makes more than {1 + within:.2f}x)")
    return (f"chunks: {_size(chosen.chunk_bytes)}: give the job --env "
            f"{ev.GLUONDIST_CHUNK_BYTES}={chosen.chunk_bytes} (steps per second against "
            f"{_size(first.chunk_bytes)}: {ratios})")


def _size(chunk_bytes: int) -> str:
    return "arrays whole" if chunk_bytes == 0 else f"{chunk_bytes} bytes"


def parse(lines: Sequence[str]) -> Optional[dict]:
    """Worker 0's result line among a job's output lines."""
    for line in lines:
        message = wire.decode(line)
        if isinstance(message, wire.Bench):
            return message.figures
    return None


def format_table(table: Sequence[Row], recommended: Row) -> List[str]:
    def opt(value, fmt):
        return format(value, fmt) if value is not None else "-"
    out = [f"{'servers':>7} {'layout':>9} {'compr':>5} {'chunk':>8} {'step s':>8} {'model s':>8} "
           f"{'error':>6} {'link eff':>8} {'whole s':>8} {'MB/worker':>9} "
           f"{'MB/busiest server':>17}"]
    for r in table:
        out.append(f"{r.servers:>7} {r.layout:>9} {r.compression:>5} {r.chunk_bytes:>8} "
                   f"{r.step_s:>8.4f} "
                   f"{r.predicted_s:>8.4f} "
                   f"{r.error:>+6.0%} {opt(r.efficiency, '>8.0%'):>8} "
                   f"{opt(r.unchunked_s, '>8.4f'):>8} {r.worker_mb:>9.1f} {r.server_mb:>17.1f}")
    out.append(advice(recommended))
    extra = [compression_advice(table, recommended), chunk_advice(table, recommended)]
    return out + [line for line in extra if line]


def layout_of(plan) -> Layout:
    return Layout(tuple(s.host for s in plan.of_role("worker")),
                  tuple(s.host for s in plan.of_role("server")))


def _check_all(jobs, base_env: Mapping[str, str]) -> None:
    """Every job's options, and over ssh every host, checked before the first job runs: a
    mistake in the last layout must not cost the rows before it."""
    from ..launcher.supervisor import resolve
    from ..launcher.transports import backend
    resolved = [resolve(options, base_env) for options in jobs]
    if resolved:  # every host of every job, each once, in the order the jobs name them
        hosts = tuple(dict.fromkeys(h for r in resolved for h in r.all_hosts))
        backend(resolved[0].launcher).preflight(
            dataclasses.replace(resolved[0], hosts=hosts, server_hosts=()))


def run(base_options, servers: Sequence[int], mbytes: float, keys: int, steps: int,
        launch_job: Callable, show: Callable[[str, bool], None], chunk_bytes: Sequence[int],
        unchunked: bool = False, base_env: Mapping[str, str] = os.environ,
        compressions: Sequence[str] = ("none",)):
    """One job per server count, and per layout when ``base_options.server_hosts`` is set (on
    the workers' hosts, then on the server hosts), through ``launch_job(options, show)``
    (which keeps the logs); returns ``(table, recommended row, failure)``, failure being the
    failed job's LaunchResult. Each job measures every one of ``compressions`` (WIRE's keys;
    the kvstore-wide ones last: MXNet keeps them for the process) in each of ``chunk_bytes``'
    chunk sizes, a row each."""
    compressions = sorted(compressions, key=lambda c: cmp.lookup(c).kvstore_wide)
    layouts: List[Tuple[str, object]] = [("colocated", ())]
    if base_options.server_hosts:
        layouts.append(("dedicated", base_options.server_hosts))
    chunks = [str(c) for c in chunk_bytes] + (["0"] if unchunked else [])
    jobs = [dataclasses.replace(base_options, num_servers=count, server_hosts=server_hosts,
                                command=(WORKER, str(mbytes), str(keys), str(steps), *chunks,
                                         "compression=" + ",".join(compressions)))
            for _, server_hosts in layouts for count in servers]
    _check_all(jobs, base_env)
    measured = []
    for options in jobs:
        where = " on the server hosts" if options.server_hosts else ""
        show(f"-s {options.num_servers}{where}: {options.num_workers} worker(s) push and pull "
             f"{mbytes:g} MB in {keys} key(s), {steps} steps", True)
        # the launcher's notes and reports are shown; the processes' own lines are not
        result = launch_job(options, lambda text, note: show(text, True) if note else None)
        if result.exit_code != 0:
            return None, None, result
        found = parse(result.logs.get("worker 0", []))
        if found is None:
            raise RuntimeError("worker 0 printed no result line")
        per = len(chunks)  # the worker's step times: per compression, per chunk size
        measured += [Measured(layout_of(result.plan), found["step_s"][i * per + j],
                              found["step_s"][i * per + per - 1] if unchunked else None,
                              found["tcp_bytes_per_s"], c, size)
                     for i, c in enumerate(compressions) for j, size in enumerate(chunk_bytes)]
    env = {**base_env, **base_options.env}
    table = rows(measured, key_sizes(mbytes, keys), chunk_bytes[0], bigarray_bound_from_env(env))
    return table, recommend(table), None
