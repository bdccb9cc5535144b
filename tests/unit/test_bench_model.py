"""The link cost model (pure): bytes on every host's link for colocated, dedicated and mixed
layouts, against values counted by hand."""
import pytest

from gluondist.bench.model import Layout, calibrate, key_parts, link_bytes, predict

MB = 2 ** 20
P = 2 * MB  # elements of the model: 8 MiB of float32
CHUNKS = [P // 8] * 8  # the same bytes in 8 keys


def test_keys_are_placed_as_mxnet_places_them():
    assert key_parts([10, 2_000_000], 2) == [[(0, 10.0)], [(0, 1e6), (1, 1e6)]]
    assert [p[0][0] for p in key_parts([1] * 4, 3)] == [0, 1, 2, 0]  # 9973 % 3 == 1
    assert key_parts([10], 2, bound=5) == [[(0, 5.0), (1, 5.0)]]  # MXNET_KVSTORE_BIGARRAY_BOUND


def test_layout_kinds():
    assert Layout(("a", "b"), ("a", "b")).kind == "colocated"
    assert Layout(("a", "b"), ("c",)).kind == "dedicated"
    assert Layout(("a", "b"), ("a", "c")).kind == "mixed"


def test_one_key_pushes_then_pulls():
    # 2 workers, one server beside worker 0: worker 1's link carries P up and P down, and the
    # pull waits for the whole push
    links = link_bytes(Layout(("a", "b"), ("a",)), [P])
    assert links.up == {"a": 4 * P, "b": 4 * P} and links.down == links.up
    assert links.bound() == 4 * P and links.busiest() == 8 * P


def test_chunks_overlap_push_and_pull():
    links = link_bytes(Layout(("a", "b"), ("a",)), CHUNKS)
    assert links.bound() == 4 * P and links.busiest() == 4 * P * (1 + 1 / 8)


def test_colocated_servers_gain_nothing_for_two_workers():
    one = link_bytes(Layout(("a", "b"), ("a",)), CHUNKS)
    two = link_bytes(Layout(("a", "b"), ("a", "b")), CHUNKS)
    assert two.busiest() == one.busiest()


def test_three_colocated_servers_for_three_workers():
    # keys k on server k % 3: server 0 (host a) holds 3 of the 8 keys
    c = 4 * P / 8
    links = link_bytes(Layout(("a", "b", "c"), ("a", "b", "c")), CHUNKS)
    assert links.up["a"] == pytest.approx(2 * 3 * c + 5 * c)  # pulls to b and c, own pushes
    assert links.fill_up["a"] == 2 * c  # one key's pull to two workers
    one = link_bytes(Layout(("a", "b", "c"), ("a",)), CHUNKS)
    assert one.up["a"] == 2 * 8 * c and one.busiest() == 2 * 8 * c + 2 * c


def test_dedicated_servers_take_the_servers_traffic_off_the_workers_links():
    c = 4 * P / 8
    one = link_bytes(Layout(("a", "b"), ("s",)), CHUNKS)
    assert one.down["s"] == 2 * 8 * c and one.up["a"] == 8 * c
    assert one.busiest() == 2 * 8 * c + 2 * c
    two = link_bytes(Layout(("a", "b"), ("s", "t")), CHUNKS)
    assert two.down["s"] == 8 * c and two.busiest() == 8 * c + 2 * c
    mixed = link_bytes(Layout(("a", "b"), ("a", "s")), CHUNKS)
    assert "s" in mixed.down and mixed.down["a"] == 4 * c + 4 * c  # b's pushes, s's pulls


def test_one_host_moves_nothing_over_a_link_and_predicts_the_calibration_row():
    links = link_bytes(Layout(("h", "h"), ("h", "h")), CHUNKS)
    assert links.busiest() == 0
    assert calibrate(links, 0.3) == 0 and predict(links, 0, 0.3) == 0.3


def test_calibrated_from_one_row():
    one = link_bytes(Layout(("a", "b"), ("s",)), CHUNKS)
    two = link_bytes(Layout(("a", "b"), ("s", "t")), CHUNKS)
    rate = calibrate(one, 0.9)
    assert predict(one, rate, 0.9) == pytest.approx(0.9)
    assert predict(two, rate, 0.9) == pytest.approx(0.9 * 10 / 18)


def _workers_sweep():
    from conftest import ROOT, load_file
    return load_file("workers", ROOT / "benchmarks" / "workers.py")


def test_the_workers_sweep_is_modelled_from_one_calibration():
    sweep = _workers_sweep()
    measured = [(w, kind, 1.0, None) for w in (1, 2, 3, 4) for kind in ("colocated", "dedicated")]
    rows = {(r["workers"], r["layout"]): r for r in sweep.sweep_rows(measured, 8, 1 << 20)}
    assert rows[1, "colocated"]["predicted_step_s"] is None  # one host: no link crossed
    assert rows[1, "dedicated"]["predicted_step_s"] == pytest.approx(1.0)  # the calibration
    # every server behind one link: W times the bytes, so the same throughput for every W
    assert [rows[w, "dedicated"]["predicted_mb_per_s"] for w in (1, 2, 3, 4)] == \
        pytest.approx([8.0] * 4)
    # a server on each worker's host: 2 x 8 MB x (W - 1) / W each way, plus the fill
    # (3 servers hold the 8 chunks as 3, 3, 2: the busiest host's share sets the step)
    assert rows[2, "colocated"]["predicted_step_s"] == pytest.approx(1.0)
    assert rows[4, "colocated"]["predicted_step_s"] == pytest.approx(15 / 9)
    assert rows[3, "colocated"]["predicted_step_s"] == pytest.approx(13 / 9)


def test_the_saved_workers_sweep_is_what_the_model_makes_of_its_step_times():
    import json
    from conftest import ROOT
    saved = json.loads((ROOT / "benchmarks" / "results" / "workers.json").read_text())
    measured = [(r["workers"], r["layout"], r["step_s"], r["link_efficiency"])
                for r in saved["rows"]]
    assert sorted((w, k) for w, k, _, _ in measured) == \
        [(w, k) for w in (1, 2, 3, 4) for k in ("colocated", "dedicated")]
    assert _workers_sweep().sweep_rows(measured, saved["mbytes"], saved["chunk_bytes"]) == \
        saved["rows"]
