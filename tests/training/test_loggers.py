"""CSVLogger and TensorBoard: what they write equals the History, read back with csv and with
TensorBoard's own reader."""
import csv
import sys

import pytest

from gluondist import CSVLogger, TensorBoard
from conftest import fit_mlp


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_rows_equal_the_history(small, tmp_path):
    path = tmp_path / "log.csv"
    _, h = fit_mlp(small[0], epochs=3, val_data=small[1], callbacks=[CSVLogger(path)])
    rows = _rows(path)
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    assert set(rows[0]) == {"epoch", *h.history}
    for key, values in h.history.items():
        assert [float(r[key]) for r in rows] == pytest.approx(values, rel=1e-12), key


def test_a_resumed_run_appends_without_repeating_epochs(small, tmp_path):
    path, ckpt = tmp_path / "log.csv", tmp_path / "ckpt"
    fit_mlp(small[0], epochs=2, checkpoint_dir=ckpt, callbacks=[CSVLogger(path)])
    with open(path, "a") as f:  # a row written just before a crash lost epoch 2's checkpoint
        f.write("2,9,9,9,9,9,9,9\n")
    _, h = fit_mlp(small[0], epochs=4, checkpoint_dir=ckpt, callbacks=[CSVLogger(path)])
    rows = _rows(path)
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3]
    assert [float(r["loss"]) for r in rows] == pytest.approx(h.history["loss"], rel=1e-12)
    fit_mlp(small[0], epochs=1, callbacks=[CSVLogger(path, append=False)])
    assert [int(r["epoch"]) for r in _rows(path)] == [0]


def test_tensorboard_scalars_equal_the_history(small, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    _, h = fit_mlp(small[0], epochs=3, val_data=small[1],
                   callbacks=[TensorBoard(tmp_path / "tb", batch_every=5)])
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(h.history) == set(events.Tags()["scalars"])
    for key, values in h.history.items():
        scalars = events.Scalars(key)
        assert [s.step for s in scalars] == [0, 1, 2]
        assert [s.value for s in scalars] == pytest.approx(values, rel=1e-6), key
    # every 5th batch of the run, counted over the epochs (14 batches each), a run of its own
    batches = EventAccumulator(str(tmp_path / "tb" / "batches"))
    batches.Reload()
    assert batches.Tags()["scalars"] == ["batch_loss"]
    assert [s.step for s in batches.Scalars("batch_loss")] == list(range(0, 3 * 14, 5))


def test_without_tensorboardx_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # what import finds uninstalled
    with pytest.raises(ImportError) as raised:
        TensorBoard(tmp_path / "tb")
    assert str(raised.value) == "gluondist.TensorBoard needs tensorboardX: pip install " \
        "'.[tensorboard]' in a gluondist checkout; pip install 'gluondist[tensorboard]' works " \
        "only once gluondist is on PyPI, which it is not yet"


def test_an_unwritable_csv_path_fails_before_training(small, tmp_path):
    with pytest.raises(ValueError, match="CSVLogger cannot write"):
        fit_mlp(small[0], callbacks=[CSVLogger(tmp_path / "missing" / "log.csv")])


def test_append_keeps_earlier_runs_and_two_quick_fits_keep_both_event_files(small, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    path, tb = tmp_path / "log.csv", tmp_path / "tb"
    net, first = fit_mlp(small[0], epochs=2, callbacks=[CSVLogger(path), TensorBoard(tb)])
    _, second = fit_mlp(small[0], epochs=2, net=net, callbacks=[CSVLogger(path), TensorBoard(tb)])
    rows = _rows(path)  # as Keras: a new run's rows follow the earlier run's
    assert [float(r["loss"]) for r in rows] == pytest.approx(
        first.history["loss"] + second.history["loss"], rel=1e-12)
    assert len(list(tb.iterdir())) == 2  # one event file per fit, even within one second
    losses = []
    for events_file in sorted(tb.iterdir()):
        events = EventAccumulator(str(events_file))
        events.Reload()
        losses.append([s.value for s in events.Scalars("loss")])
    expected = [first.history["loss"], second.history["loss"]]
    matches = [[i for i, h in enumerate(expected) if v == pytest.approx(h, rel=1e-6)]
               for v in losses]
    assert sorted(sum(matches, [])) == [0, 1], (losses, expected)
