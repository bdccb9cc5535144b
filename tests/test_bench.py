"""gluondist bench kvstore: the table, the model and the recommendation (pure), and real jobs."""
import json

import pytest

from gluondist import bench


def test_the_model_is_calibrated_by_the_single_server_row():
    # across hosts: servers share the workers' traffic until each worker's own link is the limit
    assert bench.predict(1.0, 1, 4, one_host=False) == 1.0
    assert bench.predict(1.0, 2, 4, one_host=False) == 0.5
    assert bench.predict(1.0, 8, 4, one_host=False) == 0.25
    # on one host every byte crosses the same memory: the server count does not matter
    assert bench.predict(1.0, 4, 4, one_host=True) == 1.0


def test_rows_and_recommendation():
    table = bench.rows([0.16, 0.15, 0.16], [1, 2, 4], workers=2, nbytes=64 * 2 ** 20,
                       one_host=True)
    assert [r.servers for r in table] == [1, 2, 4]
    assert table[0].worker_mb == 128 and table[1].server_mb == 128  # 2 x 64 x 2 workers / 2
    assert table[2].predicted_s == 0.16
    assert bench.recommend(table) == 1  # 0.16 is within 10% of the best 0.15
    fast = bench.rows([1.0, 0.5, 0.48], [1, 2, 4], 4, 2 ** 20, one_host=False)
    assert bench.recommend(fast) == 2 and fast[1].predicted_s == 0.5


def test_worker_zeros_result_line_is_found():
    line = bench.PREFIX + json.dumps({"step_s": 0.1, "bytes": 8})
    assert bench.parse(["noise", line])["step_s"] == 0.1
    assert bench.parse(["noise"]) is None
