"""Where MXNet puts a key, and how big gradients are cut into chunks (kv/trainer.py sends them):
library only, so that the launcher (``gluondist bench kvstore``) plans chunks without MXNet."""
from __future__ import annotations

import os
from typing import List, Tuple

from .. import envvars


# MXNet 1.9.1 (src/kvstore/kvstore_dist.h, EncodeDefaultKey) sends an array of fewer than
# MXNET_KVSTORE_BIGARRAY_BOUND elements whole to server `(key * SERVER_HASH) % num_servers`,
# computed in a C int; bigger arrays are sliced over every server without that product.
SERVER_HASH = 9973

# 1 MiB: an 8 MB gradient then travels as 8 chunks, within a few percent of the same bytes in
# 32 arrays on a link-bound job (benchmarks/), while a model of small layers sends as before.
# Each chunk is below MXNet's big-array bound, so it goes whole to one server, and consecutive
# keys alternate between servers ((key * SERVER_HASH) % servers).
CHUNK_BYTES = 1 << 20


MIN_CHUNK_BYTES = 1024  # below this the keys, not the bytes, would cost the time


def chunk_bytes_from_env() -> int:
    """``GLUONDIST_CHUNK_BYTES`` (else CHUNK_BYTES), checked: 0, or a whole number of bytes of
    at least MIN_CHUNK_BYTES."""
    text = os.environ.get(envvars.GLUONDIST_CHUNK_BYTES)
    if text is None:
        return CHUNK_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value != 0 and value < MIN_CHUNK_BYTES:
        raise ValueError(f"{envvars.GLUONDIST_CHUNK_BYTES}={text!r}: give a whole number of "
                         f"bytes, at least {MIN_CHUNK_BYTES} (such as 1048576), or 0 to send "
                         "every array whole")
    return value


def chunk_bounds(size: int, itemsize: int, chunk_bytes: int) -> List[Tuple[int, int]]:
    """``[start, stop)`` element ranges that split an array of ``size`` elements into chunks
    of at most ``chunk_bytes``, as even as possible; the whole array when it fits or when
    ``chunk_bytes`` is 0."""
    per = chunk_bytes // itemsize
    if chunk_bytes <= 0 or size <= max(per, 1):
        return [(0, size)]
    count = -(-size // max(per, 1))
    cuts = [size * i // count for i in range(count + 1)]
    return list(zip(cuts[:-1], cuts[1:]))
