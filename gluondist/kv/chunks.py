"""Where MXNet puts a key, and how big gradients are cut into chunks (kv/trainer.py sends them):
library only, so that the launcher (``gluondist bench kvstore``) plans chunks without MXNet."""
from __future__ import annotations

import os
from typing import List, Mapping, Optional, Sequence, Tuple

from .. import envvars


# MXNet 1.9.1 (src/kvstore/kvstore_dist.h, EncodeDefaultKey) sends an array of fewer than
# MXNET_KVSTORE_BIGARRAY_BOUND elements whole to server `(key * SERVER_HASH) % num_servers`,
# computed in a C int; bigger arrays are sliced over every server without that product.
SERVER_HASH = 9973
DEFAULT_BIGARRAY_BOUND = 1000 * 1000  # MXNET_KVSTORE_BIGARRAY_BOUND's default (elements)
# Past this key the product overflows and, with several servers, the index goes negative (a
# crash, "ps_key < krs[server].end()"): the keys of trainers stay below it.
MAX_KEY = (2 ** 31 - 1) // SERVER_HASH

# 512 KiB: the size of a trainer outside a job, and the largest a job chooses. Two costs pull a
# chunk's size apart. A chunk's pull can start only once every worker's push of it has
# arrived, and a worker's chunks in flight (CHUNKS_IN_FLIGHT per server) must fit in the
# links' queues: on slow links smaller chunks win. On 200 Mbit/s namespace hosts whose queues
# hold about 1.5 MB, 512 KiB (2 and 3 MiB in flight over a worker's link at 3 and 4 workers
# with a server on each host) filled them until they dropped packets, and every chunk waited
# behind them; 64 KiB dropped none and took 0.87 and 0.83 of 512 KiB's time in the same run
# (benchmarks/peers.py, benchmarks/results/peers.json). But each chunk is also a message for a
# server and a few Python calls, about 0.3 ms here: where no link limits the step, on one
# host, 64 KiB took 2.0 to 2.8 times as long as 512 KiB (benchmarks/chunk_size.py,
# benchmarks/results/chunk_size.json). So a dist_sync job given no size measures which suits
# its links (gluondist.kv.tuning); GLUONDIST_CHUNK_BYTES or make_trainer's chunk_bytes sets
# one. Each chunk is below MXNet's big-array bound, so it goes whole to one server, and
# consecutive keys alternate between servers ((key * SERVER_HASH) % servers). A model of small
# layers sends as before.
CHUNK_BYTES = 1 << 19


MIN_CHUNK_BYTES = 1024  # below this the keys, not the bytes, would cost the time

# Chunks a worker has on the wire at once, per server: pushed, their sums not yet pulled back
# (as BytePS's scheduling credit). Pushes beyond these only wait in the link's queue, where
# the TCP acknowledgements of the pulls coming the other way wait behind them, and the pulls
# slow down (benchmarks/tcp_window.py measures that pattern in raw TCP). Per server, as each
# server's link needs its own pipeline: 2 keeps one chunk moving while the other's reply is
# on its way. 0: no bound.
CHUNKS_IN_FLIGHT = 2


def chunk_bytes_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """``GLUONDIST_CHUNK_BYTES`` (else CHUNK_BYTES), checked: 0, or a whole number of bytes of
    at least MIN_CHUNK_BYTES."""
    return _whole(environ, envvars.GLUONDIST_CHUNK_BYTES, CHUNK_BYTES, MIN_CHUNK_BYTES,
                  f"bytes, at least {MIN_CHUNK_BYTES} (such as {CHUNK_BYTES}), or 0 to send "
                  "every array whole")


def fuse_bytes_from_env(chunk_bytes: int, environ: Mapping[str, str] = os.environ) -> int:
    """``GLUONDIST_FUSE_BYTES`` (else ``chunk_bytes``: a bucket of small gradients travels as
    a chunk would), checked: 0 (each gradient on its own key), or a whole number of bytes of at
    least MIN_CHUNK_BYTES."""
    return _whole(environ, envvars.GLUONDIST_FUSE_BYTES, chunk_bytes, MIN_CHUNK_BYTES,
                  f"bytes, at least {MIN_CHUNK_BYTES} (such as {CHUNK_BYTES}), or 0 to send "
                  "each small gradient on its own key")


def chunks_in_flight_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """``GLUONDIST_CHUNKS_IN_FLIGHT`` (else CHUNKS_IN_FLIGHT), checked: 0 (no bound), or a
    whole number of chunks."""
    return _whole(environ, envvars.GLUONDIST_CHUNKS_IN_FLIGHT, CHUNKS_IN_FLIGHT, 1,
                  f"chunks per server (such as {CHUNKS_IN_FLIGHT}), or 0 for no bound")


def chunk_updates_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """``GLUONDIST_CHUNK_UPDATES``, checked: 1 (the default) updates each chunk of a gradient
    as its sum comes back (gluondist.kv.updates), 0 every parameter after the last pull."""
    text = environ.get(envvars.GLUONDIST_CHUNK_UPDATES, "1")
    if text not in ("0", "1"):
        raise ValueError(f"{envvars.GLUONDIST_CHUNK_UPDATES}={text!r}: give 1 to update each "
                         "chunk as its sum comes back, or 0 to update after the last pull")
    return text == "1"


def backward_share_from_env(environ: Mapping[str, str] = os.environ) -> Optional[float]:
    """``GLUONDIST_BACKWARD_SHARE``, checked: the share (0 to 1) of a step's chunked bytes
    sent in backward's order (gluondist.kv.order); None (unset): the job chooses it."""
    text = environ.get(envvars.GLUONDIST_BACKWARD_SHARE)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise ValueError(f"{envvars.GLUONDIST_BACKWARD_SHARE}={text!r}: give the share of a "
                         "step's chunked bytes to send in backward's order, from 0 to 1 (1: "
                         "backward's order throughout), or leave it unset for the job to choose")
    return value


def bigarray_bound_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """MXNet's ``MXNET_KVSTORE_BIGARRAY_BOUND`` (else its default), checked: MXNet reads it as
    a C int, and a value it cannot read stops its scheduler and servers."""
    text = environ.get(envvars.MXNET_KVSTORE_BIGARRAY_BOUND, str(DEFAULT_BIGARRAY_BOUND))
    if not (text.isascii() and text.isdigit() and int(text) < 2 ** 31):
        raise ValueError(f"{envvars.MXNET_KVSTORE_BIGARRAY_BOUND}={text!r}: give a whole number "
                         f"of elements below 2^31 (MXNet's default: {DEFAULT_BIGARRAY_BOUND})")
    return int(text)


def check_environment(environ: Mapping[str, str]) -> None:
    """The variables above, as the workers will read them (ValueError in one line)."""
    fuse_bytes_from_env(chunk_bytes_from_env(environ), environ)
    chunks_in_flight_from_env(environ)
    chunk_updates_from_env(environ)
    backward_share_from_env(environ)
    bigarray_bound_from_env(environ)


def _whole(environ: Mapping[str, str], name: str, default: int, least: int, what: str) -> int:
    """``environ[name]``: 0 or a whole number of at least ``least``, in ASCII digits; else
    one line asking for ``what``."""
    text = environ.get(name)
    if text is None:
        return default
    value = int(text) if text.isascii() and text.isdigit() else -1
    if value != 0 and value < least:
        raise ValueError(f"{name}={text!r}: give a whole number of {what}")
    return value


SKIP = "skip"  # a group for fused_runs: an array never sent at a step (not trained), passed over


def fused_runs(nbytes: Sequence[int], groups: Sequence[object], capacity: int) -> List[List[int]]:
    """The runs of arrays the trainer sends fused on one key (gluondist.kv.fusion): consecutive
    arrays of one group (None: not fusable, which ends a run; SKIP: not sent, passed over, as
    BatchNorm's statistics between its layers' weights; the trainer's groups are dtype and
    devices), at most ``capacity`` bytes a run, runs of two or more."""
    runs: List[List[int]] = []
    run: List[int] = []
    total = 0
    for i, (size, group) in enumerate(zip(nbytes, groups)):
        if group == SKIP:
            continue
        if run and (group is None or group != groups[run[0]] or total + size > capacity):
            runs.append(run)
            run = []
        if group is not None and size <= capacity:
            total = size if not run else total + size
            run.append(i)
    runs.append(run)
    return [r for r in runs if len(r) > 1]


def chunk_bounds(size: int, itemsize: int, chunk_bytes: int) -> List[Tuple[int, int]]:
    """``[start, stop)`` element ranges that split an array of ``size`` elements into chunks
    of at most ``chunk_bytes``, as even as possible; the whole array when it fits or when
    ``chunk_bytes`` is 0."""
    count = chunk_count(size, itemsize, chunk_bytes)
    cuts = [size * i // count for i in range(count + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def chunk_count(size: int, itemsize: int, chunk_bytes: int) -> int:
    """How many chunks ``chunk_bounds`` cuts an array of ``size`` elements into."""
    per = max(chunk_bytes // itemsize, 1)
    return 1 if chunk_bytes <= 0 or size <= per else -(-size // per)
