"""``gluondist bench kvstore``: measure a dist_sync job's communication for several server
counts, print it next to the cost model's prediction, and recommend a server count.

Each server count is a real job started through the launcher's one path (the same placement,
supervision and failure reports as ``gluondist launch``); its workers run ``worker.py``.

The cost model (README, "Choosing the number of servers"): per step every worker pushes and
pulls the model's P bytes, so a worker's link carries 2P and, with the keys spread evenly, a
server's link 2WP times its share of the keys (1/S when they spread evenly; MXNet's placement
rules in :func:`busiest_share`). Across hosts the step takes T(S) = max(2WP share / B, 2P / B)
for link bandwidth B, which the single-server row calibrates: T(S) = T(1) max(share, 1/W).
On one host every byte goes through the same memory and cores whatever S is: T(S) = T(1).
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence

from .. import envvars as ev
from ..launcher.errors import LaunchError

PREFIX = "gluondist-bench "
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
BIGARRAY_BOUND = 1000 * 1000  # MXNet's default MXNET_KVSTORE_BIGARRAY_BOUND


def key_sizes(mbytes: float, keys: int) -> List[int]:
    """float32 elements per key: ``mbytes`` split as evenly as possible into ``keys`` arrays."""
    total = max(keys, int(mbytes * 2 ** 20 / 4))
    return [total // keys + (1 if i < total % keys else 0) for i in range(keys)]


def busiest_share(sizes: Sequence[int], servers: int, bound: int = BIGARRAY_BOUND) -> float:
    """The fraction of the elements that the busiest server holds, as MXNet 1.9.1 places keys
    0..K-1: an array of at least ``bound`` (MXNET_KVSTORE_BIGARRAY_BOUND) elements is sliced
    evenly over every server, a smaller one goes whole to server (key * 9973) % servers."""
    load = [0.0] * servers
    for key, size in enumerate(sizes):
        if size >= bound:
            for s in range(servers):
                load[s] += size / servers
        else:
            load[(key * 9973) % servers] += size
    return max(load) / sum(sizes)


def one_host(options, servers: Sequence[int]) -> bool:
    """Whether every worker and server of each measured job is on one host, from the
    resolved ``options`` (``-H``'s hosts and slots, or the Slurm allocation's nodes)."""
    from ..launcher.plan import placement_of
    for count in servers:
        placed = placement_of(dataclasses.replace(options, num_servers=count))
        if len({h.name for h in (*placed.servers, *placed.workers)}) > 1:
            return False
    return True


@dataclass(frozen=True)
class Row:
    servers: int
    step_s: float
    worker_mb: float  # megabytes each worker moves per step (push + pull)
    server_mb: float  # megabytes the busiest server moves per step (all workers' push + pull)
    gbytes_per_s: float  # each worker's effective throughput
    predicted_s: float

    def as_dict(self) -> dict:
        return {"servers": self.servers, "step_s": self.step_s, "worker_mb_per_step":
                self.worker_mb, "busiest_server_mb_per_step": self.server_mb,
                "worker_gb_per_s": self.gbytes_per_s, "predicted_step_s": self.predicted_s}


def predict(one_server_s: float, share: float, workers: int, one_host: bool) -> float:
    """The model's step time when the busiest server holds ``share`` of the bytes, calibrated
    by the measured single-server step."""
    if one_host:
        return one_server_s
    return one_server_s * max(share, 1.0 / workers)


def rows(steps_s: Sequence[float], servers: Sequence[int], workers: int,
         sizes: Sequence[int], one_host: bool, bound: int = BIGARRAY_BOUND) -> List[Row]:
    """The table, from the measured step time of each server count (``servers[0]`` need not
    be 1: the model is then calibrated from the smallest count, scaled to one server)."""
    share = {s: busiest_share(sizes, s, bound) for s in servers}
    base = min(servers)
    base_s = steps_s[list(servers).index(base)]
    one_server_s = base_s if one_host else base_s / max(share[base], 1.0 / workers)
    nbytes = 4 * sum(sizes)
    mb = nbytes / 2 ** 20
    return [Row(s, t, 2 * mb, 2 * mb * workers * share[s], 2 * nbytes / t / 1e9,
                predict(one_server_s, share[s], workers, one_host))
            for s, t in zip(servers, steps_s)]


def recommend(table: Sequence[Row], within: float = 0.10) -> int:
    """The smallest server count whose step time is within ``within`` of the best."""
    best = min(r.step_s for r in table)
    return min(r.servers for r in table if r.step_s <= best * (1 + within))


def parse(lines: Sequence[str]) -> Optional[dict]:
    """Worker 0's result line among a job's output lines."""
    for line in lines:
        if line.startswith(PREFIX):
            return json.loads(line[len(PREFIX):])
    return None


def format_table(table: Sequence[Row], recommended: int) -> List[str]:
    out = [f"{'servers':>7} {'step s':>8} {'model s':>8} {'MB/worker':>10} "
           f"{'MB/busiest server':>18} {'GB/s/worker':>12}"]
    for r in table:
        out.append(f"{r.servers:>7} {r.step_s:>8.4f} {r.predicted_s:>8.4f} {r.worker_mb:>10.1f} "
                   f"{r.server_mb:>18.1f} {r.gbytes_per_s:>12.3f}")
    out.append(f"recommended: -s {recommended} (the fewest servers within 10% of the best step "
               "time)")
    return out


def run(base_options, servers: Sequence[int], mbytes: float, keys: int, steps: int,
        launch_job: Callable, show: Callable[[str, bool], None],
        base_env: Optional[Mapping[str, str]] = None):
    """One job per server count, through ``launch_job(options, show, record)``; returns
    ``(table, recommended, failure)`` where failure is the failed job's LaunchResult. The
    model takes the placement and MXNET_KVSTORE_BIGARRAY_BOUND the jobs really get (``-H``,
    Slurm, ``--env``; ``base_env`` is the launcher's environment)."""
    from ..launcher.plan import user_value
    from ..launcher.session import resolve
    base_env = os.environ if base_env is None else base_env
    command = (WORKER, str(mbytes), str(keys), str(steps))
    resolved = resolve(dataclasses.replace(base_options, command=command), base_env)
    bound = user_value(resolved, base_env, ev.MXNET_KVSTORE_BIGARRAY_BOUND)
    try:
        bound = int(bound) if bound is not None else BIGARRAY_BOUND
    except ValueError:
        raise LaunchError(f"MXNET_KVSTORE_BIGARRAY_BOUND={bound!r} is not a whole number of "
                          "elements") from None
    measured = []
    for count in servers:
        lines: List[str] = []
        options = dataclasses.replace(base_options, num_servers=count, command=command)
        show(f"-s {count}: {options.num_workers} worker(s) push and pull {mbytes:g} MB in "
             f"{keys} key(s), {steps} steps", True)
        # the launcher's notes and reports are shown; the processes' own lines are not
        result = launch_job(options, lambda text, note: show(text, True) if note else None,
                            lambda spec, line: lines.append(line) if spec.label == "worker 0"
                            else None)
        if result.exit_code != 0:
            return None, None, result
        found = parse(lines)
        if found is None:
            raise RuntimeError("worker 0 printed no result line")
        measured.append(found)
    table = rows([m["step_s"] for m in measured], servers, base_options.num_workers,
                 key_sizes(mbytes, keys), one_host(resolved, servers), bound)
    return table, recommend(table), None
