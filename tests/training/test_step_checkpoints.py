"""fit(checkpoint_every=N): checkpoints within epochs, written in the background, and a resume
that continues mid-epoch exactly (issue 35). The real jobs: e2e/test_step_checkpoint_jobs.py."""
import csv
import json
import os
import re
import threading

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import Callback, CSVLogger, EarlyStopping, TensorBoard, checkpoint, snapshot

from conftest import assert_same_params, fit_mlp, mlp, params_of
from fits import Interrupt

SPEED = ("seconds", "per_s", "slowest")  # timings: never equal across runs


def figures(history):
    return {k: v for k, v in history.history.items() if not any(s in k for s in SPEED)}


def dropout_bn_net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(32, activation="relu"), mx.gluon.nn.Dropout(0.3),
            mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(10))
    return net


def crash_and_resume(data, tmp_path, crashes, net=mlp, **kw):
    """fit interrupted (Ctrl-C) after each of ``crashes`` (epoch, batch), each time in a new
    process's stead (a fresh net), then run to its end; returns ``(net, history)``."""
    for epoch, batch in crashes:
        with pytest.raises(KeyboardInterrupt):
            fit_mlp(data, net=net(), checkpoint_dir=tmp_path,
                    callbacks=[Interrupt(epoch, batch)] + kw.get("callbacks", []),
                    **{k: v for k, v in kw.items() if k != "callbacks"})
    return fit_mlp(data, net=net(), checkpoint_dir=tmp_path, **kw)


@pytest.mark.parametrize("accumulate,resumed_at", [
    (1, ["in epoch 1 of 3, after its batch 8 of 14", "in epoch 2 of 3, after its batch 10 of 14"]),
    # 3 batches an update, 5 updates an epoch (the last partial): every 2nd is at batch 6 of
    # epoch 1, batch 3 and 9 of epoch 2; the line says the updates too
    (3, ["in epoch 1 of 3, after its batch 6 of 14, its update 2 of 5",
         "in epoch 2 of 3, after its batch 9 of 14, its update 3 of 5"]),
])
def test_a_resume_mid_epoch_ends_bit_equal_to_the_uninterrupted_run(small, tmp_path, capsys,
                                                                     accumulate, resumed_at):
    """Adam, dropout, BatchNorm on two devices, accumulation; 14 batches an epoch, crashes
    after batch 9 of epoch 1, 11 of epoch 2, then 12 of epoch 2 (before that batch's
    checkpoint: the same one is resumed twice)."""
    kw = dict(epochs=3, optimizer="adam", optimizer_params={"learning_rate": 0.01},
              ctx=[mx.cpu(0), mx.cpu(1)], checkpoint_every=2, accumulate=accumulate)
    full, hf = fit_mlp(small[0], net=dropout_bn_net(), checkpoint_dir=tmp_path / "a", **kw)
    capsys.readouterr()
    resumed, hr = crash_and_resume(small[0], tmp_path / "b", [(0, 8), (1, 10), (1, 11)],
                                   net=dropout_bn_net, **kw)
    said = re.findall(r"resuming from \S+ (in epoch .*) \(resume=False starts over\)",
                      capsys.readouterr().err)
    assert said == [resumed_at[0], resumed_at[1], resumed_at[1]]
    assert_same_params(resumed, full)
    assert figures(hr) == figures(hf)  # every epoch's row, the resumed ones included


def test_the_resume_line_names_the_epoch_and_batch(small, tmp_path, capsys):
    # 14 batches an epoch, a checkpoint every 4 updates: in epoch 2 after batches 2, 6, 10
    with pytest.raises(KeyboardInterrupt):  # after batch 10, before its checkpoint
        fit_mlp(small[0], epochs=2, checkpoint_every=4, checkpoint_dir=tmp_path,
                callbacks=[Interrupt(1, 9)])
    capsys.readouterr()
    fit_mlp(small[0], epochs=2, checkpoint_every=4, checkpoint_dir=tmp_path)
    assert f"fit: resuming from {tmp_path} in epoch 2 of 2, after its batch 6 of 14 " \
           "(resume=False starts over)" in capsys.readouterr().err
    latest = checkpoint.load_latest(tmp_path)
    assert (latest.epoch, latest.batch) == (1, None)  # the last is the epoch's end


def test_a_checkpoint_falls_every_n_updates_counted_over_the_run(small, tmp_path):
    seen = []

    class Watch(Callback):
        def on_batch_end(self, run, batch, logs):
            latest = checkpoint.load_latest(tmp_path)
            seen.append(None if latest is None else (latest.epoch, latest.batch))

    # a Checkpointer that writes at once, so that each on_batch_end sees the newest
    fit_mlp(small[0], epochs=2, checkpoint_every=5, checkpoint_dir=tmp_path,
            callbacks=[Watch(), _Synchronous(tmp_path)])
    marks = [s for i, s in enumerate(seen) if s is not None and s not in seen[:i]]
    # 14 batches an epoch: updates 5 and 10 in epoch 1, its end, 15, 20, 25 (batches 1, 6, 11)
    assert marks == [(0, 5), (0, 10), (0, None), (1, 1), (1, 6), (1, 11)]


class _Synchronous(gluondist.Checkpointer):
    """Writes each checkpoint before the next batch (for tests that look between batches)."""

    def save(self, run, epoch, batch=None, sums=None):
        super().save(run, epoch, batch, sums)
        if self._writer is not None:
            self._writer.drain()


def test_callbacks_and_loggers_resumed_mid_epoch_keep_one_row_per_epoch(small, tmp_path):
    def calls():
        return [CSVLogger(tmp_path / "log.csv"), EarlyStopping(monitor="val_loss", patience=5),
                TensorBoard(tmp_path / "tb")]
    kw = dict(epochs=3, val_data=small[1], checkpoint_every=3)
    full, hf = fit_mlp(small[0], checkpoint_dir=tmp_path / "a", callbacks=calls(), **kw)
    with open(tmp_path / "log.csv") as f:
        want = [{k: v for k, v in row.items() if not any(s in k for s in SPEED)}
                for row in csv.DictReader(f)]
    os.remove(tmp_path / "log.csv")
    resumed, hr = crash_and_resume(small[0], tmp_path / "b", [(1, 5), (2, 3)],
                                   callbacks=calls(), **kw)
    with open(tmp_path / "log.csv") as f:
        got = [{k: v for k, v in row.items() if not any(s in k for s in SPEED)}
               for row in csv.DictReader(f)]
    assert got == want and [r["epoch"] for r in got] == ["0", "1", "2"]
    assert_same_params(resumed, full)
    assert figures(hr) == figures(hf)


def test_a_crash_after_the_loggers_wrote_the_first_epoch_repeats_no_row(small, tmp_path):
    """The loggers wrote epoch 1's row, then the process stopped before that epoch's
    checkpoint: the run resumes mid-epoch 1 (run.start 0) from its step checkpoint and writes
    the row again, which must replace the first, in the CSV and in TensorBoard (its purge
    step), the batches' points too."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    class StopAtEpochEnd(Callback):  # after the loggers, before fit's checkpoint
        def on_epoch_end(self, run, epoch, logs):
            raise KeyboardInterrupt

    def loggers(name):
        return [CSVLogger(tmp_path / f"{name}.csv"), TensorBoard(tmp_path / name, batch_every=4)]

    def read(name):
        with open(tmp_path / f"{name}.csv") as f:
            rows = [{k: v for k, v in row.items() if not any(s in k for s in SPEED)}
                    for row in csv.DictReader(f)]
        points = {}
        for where, tag in ((name, "loss"), (f"{name}/batches", "batch_loss")):
            events = EventAccumulator(str(tmp_path / where))
            events.Reload()
            points[tag] = [(s.step, s.value) for s in events.Scalars(tag)]
        return rows, points
    kw = dict(epochs=2, checkpoint_every=5)  # 14 batches an epoch: one at batch 10
    full, hf = fit_mlp(small[0], checkpoint_dir=tmp_path / "a", callbacks=loggers("a"), **kw)
    with pytest.raises(KeyboardInterrupt):
        fit_mlp(small[0], checkpoint_dir=tmp_path / "b",
                callbacks=loggers("b") + [StopAtEpochEnd()], **kw)
    assert checkpoint.load_latest(tmp_path / "b").epoch == 0  # mid-epoch 1: run.start is 0
    resumed, hr = fit_mlp(small[0], checkpoint_dir=tmp_path / "b", callbacks=loggers("b"), **kw)
    assert read("b") == read("a")
    assert [r["epoch"] for r in read("b")[0]] == ["0", "1"]
    assert_same_params(resumed, full)
    assert figures(hr) == figures(hf)


def test_a_dataloader_with_workers_resumes_mid_epoch_exactly(small, tmp_path):
    X, y = small[0]
    loader = lambda: mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(X, y), batch_size=30,
                                              shuffle=True, num_workers=2)
    kw = dict(epochs=2, checkpoint_every=3)
    full, hf = fit_mlp(loader(), checkpoint_dir=tmp_path / "a", **kw)
    for crash in [(0, 7), (1, 4)]:
        with pytest.raises(KeyboardInterrupt):
            fit_mlp(loader(), checkpoint_dir=tmp_path / "b", callbacks=[Interrupt(*crash)], **kw)
    resumed, hr = fit_mlp(loader(), checkpoint_dir=tmp_path / "b", **kw)
    assert_same_params(resumed, full)
    assert figures(hr) == figures(hf)


def test_a_pipeline_resumes_mid_epoch_exactly(small, tmp_path):
    kw = dict(epochs=2, checkpoint_every=4, parallel="pipeline", ctx=[mx.cpu(0), mx.cpu(1)],
              micro_batches=2)
    full, hf = fit_mlp(small[0], checkpoint_dir=tmp_path / "a", **kw)
    resumed, hr = crash_and_resume(small[0], tmp_path / "b", [(0, 9)], **kw)
    assert_same_params(resumed, full)
    assert figures(hr) == figures(hf)


@pytest.mark.parametrize("every,message", [
    (0, r"^checkpoint_every must be a positive integer, not 0$"),
    (-3, r"^checkpoint_every must be a positive integer, not -3$"),
    (2.5, r"^checkpoint_every must be a positive integer, not 2.5$"),
    (True, r"^checkpoint_every must be a positive integer, not True$"),
])
def test_a_bad_checkpoint_every_is_refused_in_one_line(small, every, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        fit_mlp(small[0], checkpoint_every=every, checkpoint_dir=tmp_path)


def test_checkpoint_every_without_a_directory_is_refused(small):
    with pytest.raises(ValueError, match=r"^checkpoint_every=5 needs a checkpoint_dir to write "
                                         r"the checkpoints to; pass checkpoint_dir="):
        fit_mlp(small[0], checkpoint_every=5)


def test_checkpoint_every_under_dist_async_is_refused():
    from gluondist.kv.kinds import Mode
    from gluondist.training.config import _check_every
    with pytest.raises(ValueError, match=r"^checkpoint_every needs workers that step together, "
                                         r"but under dist_async each worker is at its own step"):
        _check_every(5, "/tmp", Mode("dist_async"))


def test_a_write_that_fails_is_raised_at_the_next_step(small, tmp_path, monkeypatch):
    write = snapshot.Snapshot.write
    steps = []

    def failing(self, directory):
        if self.batch == 8:  # the second step checkpoint of epoch 1 (every 4 updates)
            raise OSError(f"cannot write the checkpoint of epoch 1, batch 8 to {directory}: "
                          "no space left on device; the earlier checkpoints are kept")
        return write(self, directory)

    class Count(Callback):
        def on_batch_end(self, run, batch, logs):
            steps.append(batch)

    monkeypatch.setattr(snapshot.Snapshot, "write", failing)
    with pytest.raises(OSError, match=r"cannot write the checkpoint of epoch 1, batch 8 to .*: "
                                      r"no space left on device; the earlier checkpoints are kept"):
        fit_mlp(small[0], epochs=2, checkpoint_every=4, checkpoint_dir=tmp_path,
                callbacks=[Count(), _Slow()])
    assert steps[-1] <= 8 + 1  # raised at the step after the write failed, or the one after
    latest = checkpoint.load_latest(tmp_path)
    assert (latest.epoch, latest.batch) == (0, 4)  # the one before is intact


class _Slow(Callback):
    """Gives a background write time to end between two batches (a write that failed is
    then raised at the very next step)."""

    def on_batch_end(self, run, batch, logs):
        threading.Event().wait(0.05)


def test_a_write_still_running_when_the_next_is_due_is_waited_for_and_said_once(
        small, tmp_path, monkeypatch, caplog):
    write = snapshot.Snapshot.write

    def slow(self, directory):
        threading.Event().wait(0.3)
        return write(self, directory)

    monkeypatch.setattr(snapshot.Snapshot, "write", slow)
    fit_mlp(small[0], epochs=1, checkpoint_every=1, checkpoint_dir=tmp_path)
    said = [r.getMessage() for r in caplog.records if "waits for the one before it" in
            r.getMessage()]
    assert len(said) == 1 and "raise checkpoint_every" in said[0]
    assert checkpoint.load_latest(tmp_path).batch is None  # the epoch's end, complete at return


@pytest.mark.parametrize("every,epochs,said", [
    (13, 1, None),  # 14 batches: the epoch's end waits for the step checkpoint of batch 13
    (15, 2, None),  # the step checkpoint of epoch 2's batch 1 waits for epoch 1's end
    (None, 3, "writes take longer than an epoch: fit waits for each"),
])
def test_what_an_epochs_end_that_waits_says(small, tmp_path, monkeypatch, caplog, every,
                                            epochs, said):
    """A wait across an epoch's end (its checkpoint and a step checkpoint a few steps before
    or after it) says nothing: a larger checkpoint_every would not help. Epochs shorter than
    a write are said once."""
    write = snapshot.Snapshot.write

    def slow(self, directory):
        threading.Event().wait(0.5)
        return write(self, directory)

    monkeypatch.setattr(snapshot.Snapshot, "write", slow)
    fit_mlp(small[0], epochs=epochs, checkpoint_every=every, checkpoint_dir=tmp_path)
    waits = [r.getMessage() for r in caplog.records if "waits for the one before it" in
             r.getMessage()]
    assert waits == ([] if said is None else [
        f"fit: the checkpoint of epoch 2 waits for the one before it, still being written "
        f"({said})"])


def test_without_checkpoint_every_there_are_no_step_checkpoints(small, tmp_path):
    fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    states = [json.loads((tmp_path / d / "state.json").read_text()) for d in
              sorted(os.listdir(tmp_path)) if d.startswith("ckpt-")]
    assert [(s["epoch"], s["batch"]) for s in states] == [(0, None), (1, None)]


def test_a_format_4_checkpoint_is_still_resumed(small, tmp_path, capsys):
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    path = checkpoint.load_latest(tmp_path).path / "state.json"
    state = json.loads(path.read_text())
    state["format"] = 4
    del state["batch"], state["sums"]
    path.write_text(json.dumps(state))
    net, h = fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    assert "after epoch 1 of 2" in capsys.readouterr().err and len(h.history["loss"]) == 2


def test_the_snapshot_is_what_the_step_held_though_training_goes_on(small, tmp_path):
    """The copies are taken at the step: the parameters written are those after the
    checkpoint's batch, not of a later one that trained while the thread wrote."""
    at = {}

    class Keep(Callback):
        def on_batch_end(self, run, batch, logs):  # before that batch's checkpoint is taken
            if (run.epoch, batch) == (0, 11):  # every 4 updates: checkpoints after 4, 8, 12
                at.update(params_of(run.net))

    net, _ = fit_mlp(small[0], epochs=1, checkpoint_every=4, checkpoint_dir=tmp_path,
                     callbacks=[Keep()])
    kept = {json.loads((tmp_path / d / "state.json").read_text())["batch"]: d
            for d in os.listdir(tmp_path) if d.startswith("ckpt-")}
    assert sorted(kept, key=str) == [12, None]  # KEEP = 2: the epoch's end and batch 12
    saved = mx.nd.load(str(tmp_path / kept[12] / "net.params"))
    assert all(np.array_equal(saved[k].asnumpy(), at[k]) for k in at)
    assert not all(np.array_equal(saved[k].asnumpy(), v) for k, v in params_of(net).items())


def test_a_resize_request_stops_at_the_next_step_checkpoint_and_resumes_exactly(
        small, tmp_path, capsys):
    """What an elastic grow does to each worker (e2e/test_elastic_netns.py has the jobs): asked
    after batch 5 of epoch 2, fit leaves with elastic.EXIT after that epoch's checkpoint of
    batch 6 (every 4 updates: 14 + 6 = 20), once it is written, not at the epoch's end."""
    from gluondist import elastic

    class Ask(Callback):
        def on_batch_end(self, run, batch, logs):
            if (run.epoch, batch) == (1, 4):
                elastic.request()

    full, _ = fit_mlp(small[0], epochs=3, checkpoint_every=4, checkpoint_dir=tmp_path / "a")
    try:
        with pytest.raises(SystemExit) as stopped:
            fit_mlp(small[0], epochs=3, checkpoint_every=4, checkpoint_dir=tmp_path / "b",
                    callbacks=[Ask()])
    finally:
        elastic._asked.clear()
    assert stopped.value.code == elastic.EXIT
    assert "fit: stopping after the checkpoint of epoch 2, batch 6: the launcher restarts " \
           "the job on the hosts it finds then, which resumes from it" in capsys.readouterr().err
    latest = checkpoint.load_latest(tmp_path / "b")
    assert (latest.epoch, latest.batch) == (1, 6)
    resumed, _ = fit_mlp(small[0], epochs=3, checkpoint_every=4, checkpoint_dir=tmp_path / "b")
    assert_same_params(resumed, full)


def test_parameters_that_turn_nan_mid_epoch_are_never_in_a_step_checkpoint(small, tmp_path):
    """NaN in samples of a Dataset hides from the loss (relu passes it as 0) but turns the
    weights NaN: the writer refuses the step checkpoint that would hold them, and fit raises
    its error at a later step, before the epoch's end; the checkpoints written are finite."""
    (X, y), _ = small
    X = X.copy()
    X[::40, :] = np.nan  # 10 of 400: one comes in an early batch, well before a checkpoint
    ended = []

    class Ends(Callback):
        def on_epoch_end(self, run, epoch, logs):
            ended.append(epoch)
    with pytest.raises(FloatingPointError, match=r"^parameter\(s\) .* became NaN or infinite "
                                                 r"in epoch 1/2, by its batch \d+: "):
        fit_mlp(mx.gluon.data.SimpleDataset(list(zip(X, y))), checkpoint_every=2,
                checkpoint_dir=tmp_path, epochs=2, callbacks=[Ends()])
    assert ended == []  # the writer's check, not the epoch end's
    for name in os.listdir(tmp_path):
        if name.startswith("ckpt-"):
            params = mx.nd.load(str(tmp_path / name / "net.params"))
            assert all(np.isfinite(a.asnumpy()).all() for a in params.values()), name
    latest = checkpoint.load_latest(tmp_path)
    assert latest is None or (latest.epoch, latest.batch is not None) == (0, True)
