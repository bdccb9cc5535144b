"""Checkpoints and resume in one process: exact resumes, fresh runs, what is refused
(another model or optimizer, the earlier format), what is skipped (broken, malformed,
planted files), a full disk mid-write. A kill mid-write: e2e/test_checkpoint_kill.py."""
import csv
import json
import os
import pickle
import shutil
import subprocess

import mxnet as mx
import numpy as np
import pytest

import gluondist
from gluondist import Callback, checkpoint, Checkpointer, CSVLogger, EarlyStopping

from conftest import assert_same_history, assert_same_params, curves, fit_mlp, mlp, wait_until
from fits import Feed, Interrupt, fit_on


# (10) a full disk
@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


class Planted:
    """Unpickling this runs code: it would create the file named in ``path``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class StopAt(Callback):
    def __init__(self, epoch, batch):
        self.at = (epoch, batch)

    def on_batch_end(self, run, batch, logs):
        if (run.epoch, batch) == self.at:
            run.stop_training = True


def _planted(directory, state):
    path = directory / "ckpt-000050"
    path.mkdir()
    (path / "state.json").write_text(state)
    return path


def test_resume_continues_where_an_interrupted_run_stopped(small, tmp_path):
    full, hf = fit_on(None, small[0], epochs=4)
    first, _ = fit_on(None, small[0], epochs=2, checkpoint_dir=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000", "ckpt-000001"]
    resumed, hr = fit_on(None, small[0], epochs=4, seed=99, checkpoint_dir=tmp_path)  # seed kept
    assert_same_params(resumed, full, 1e-4)
    assert_same_history(hr, hf)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000002", "ckpt-000003"]


def test_resume_false_starts_over(small, tmp_path):
    fit_on(None, small[0], epochs=2, checkpoint_dir=tmp_path)
    _, h = fit_on(None, small[0], epochs=1, checkpoint_dir=tmp_path, resume=False)
    assert len(h.history["loss"]) == 1


def test_resume_false_starts_a_fresh_run_that_later_resumes(small, tmp_path):
    fit_mlp(small[0], epochs=5, checkpoint_dir=tmp_path)  # run A
    full, hf = fit_mlp(small[0], epochs=4, seed=3)
    _, hb = fit_mlp(small[0], epochs=3, seed=3, checkpoint_dir=tmp_path, resume=False)  # run B
    assert len(hb.history["loss"]) == 3
    resumed, hr = fit_mlp(small[0], epochs=4, seed=3, checkpoint_dir=tmp_path)  # continues B
    assert len(hr.history["loss"]) == 4
    assert_same_params(resumed, full, 1e-4)
    assert_same_history(hr, hf)


def test_resume_false_then_a_crash_before_any_checkpoint_never_resumes_the_old_run(small,
                                                                                tmp_path):
    fit_mlp(small[0], epochs=3, checkpoint_dir=tmp_path)

    class Crash(Callback):
        def on_batch_end(self, run, batch, logs):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit_mlp(small[0], epochs=3, checkpoint_dir=tmp_path, resume=False, callbacks=[Crash()])
    _, h = fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    assert len(h.history["loss"]) == 1  # a fresh start, not run A's epoch 3


def test_a_stop_mid_epoch_then_resume_equals_an_uninterrupted_run(small, tmp_path):
    full, hf = fit_mlp(small[0], epochs=4)
    _, hs = fit_mlp(small[0], epochs=4, checkpoint_dir=tmp_path, callbacks=[StopAt(1, 3)])
    assert len(hs.history["loss"]) == 2  # epoch 2 (index 1) was finished, then it stopped
    resumed, hr = fit_mlp(small[0], epochs=4, checkpoint_dir=tmp_path)
    assert_same_params(resumed, full, 1e-4)
    assert_same_history(hr, hf)


VAL_LOSSES = [3, 2, 2.5, 2.6, 2.7, 2.8]  # scripted: EarlyStopping(patience=1) stops after epoch 3


def test_a_run_that_stopped_early_resumes_to_where_it_ended(small, tmp_path):
    full, hf = fit_mlp(small[0], epochs=6, val_data=small[1],
                       callbacks=[Feed("val_loss", VAL_LOSSES), EarlyStopping(patience=1)])
    fit_mlp(small[0], epochs=6, val_data=small[1], checkpoint_dir=tmp_path,
            callbacks=[Feed("val_loss", VAL_LOSSES), EarlyStopping(patience=1)])
    again, h = fit_mlp(small[0], epochs=6, val_data=small[1], checkpoint_dir=tmp_path,
                       callbacks=[Feed("val_loss", VAL_LOSSES), EarlyStopping(patience=1)])
    assert len(h.history["loss"]) == len(hf.history["loss"]) == 3
    assert_same_params(again, full)


def test_early_stopping_state_survives_a_resume(small, tmp_path):
    stop = EarlyStopping(patience=2)
    _, h = fit_mlp(small[0], epochs=3, val_data=small[1], checkpoint_dir=tmp_path,
                   callbacks=[Feed("val_loss", VAL_LOSSES), stop])
    resumed = EarlyStopping(patience=2)
    _, h = fit_mlp(small[0], epochs=6, val_data=small[1], checkpoint_dir=tmp_path,
                   callbacks=[Feed("val_loss", VAL_LOSSES), resumed])
    # 2.5, then 2.6 after the resume: two epochs without improving on 2 (patience 2) -> stop;
    # without its state it would start over at 2.6 and run all six epochs
    assert len(h.history["loss"]) == 4 and resumed.stopped_epoch == 3


def test_best_weights_survive_a_resume(small, tmp_path):
    kw = dict(val_data=small[1], checkpoint_dir=tmp_path / "ckpt",
              optimizer_params={"learning_rate": 1.5, "momentum": 0.9})
    full_stop = EarlyStopping("val_loss", patience=20, restore_best_weights=True)
    full, hf = fit_mlp(small[0], epochs=6, callbacks=[full_stop],
                       val_data=small[1], optimizer_params=kw["optimizer_params"])
    fit_mlp(small[0], epochs=3, callbacks=[EarlyStopping("val_loss", patience=20,
                                                      restore_best_weights=True)], **kw)
    resumed, hr = fit_mlp(small[0], epochs=6, callbacks=[
        EarlyStopping("val_loss", patience=20, restore_best_weights=True)], **kw)
    assert_same_params(resumed, full, 1e-4)


# (12) resumed CSV logs keep every row the History has
@pytest.mark.parametrize("append", [True, False])
def test_a_resumed_csv_log_has_every_epoch(small, tmp_path, append):
    ckpt, path = tmp_path / "ckpt", tmp_path / "log.csv"
    with pytest.raises(KeyboardInterrupt):
        fit_mlp(small[0], epochs=5, checkpoint_dir=ckpt,
                callbacks=[CSVLogger(path, append=append), Interrupt(3, 2)])
    _, h = fit_mlp(small[0], epochs=5, checkpoint_dir=ckpt,
                   callbacks=[CSVLogger(path, append=append)])
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3, 4]
    assert [float(r["loss"]) for r in rows] == pytest.approx(h.history["loss"], rel=1e-12)


# (9) a Checkpointer passed is what fit resumes from
def test_a_passed_checkpointer_is_resumed_from(small, tmp_path):
    ref, href = fit_mlp(small[0], epochs=3)
    net = mlp()
    fit_mlp(small[0], epochs=2, net=net, callbacks=[Checkpointer(tmp_path / "b")])
    _, h = fit_mlp(small[0], epochs=3, net=net, callbacks=[Checkpointer(tmp_path / "b")])
    assert curves(h.history) == curves(href.history)
    assert_same_params(net, ref)
    assert sorted(os.listdir(tmp_path / "b")) == ["ckpt-000001", "ckpt-000002"]
    fit_mlp(small[0], epochs=4, net=net, checkpoint_dir=tmp_path / "b" / ".." / "b",
            callbacks=[Checkpointer(tmp_path / "b")])  # the same directory: fine
    with pytest.raises(ValueError, match="checkpoint_dir .*a and the Checkpointer's directory "
                                         ".*b differ"):
        fit_mlp(small[0], checkpoint_dir=tmp_path / "a", callbacks=[Checkpointer(tmp_path / "b")])
    with pytest.raises(ValueError, match="holds 2 Checkpointers"):
        fit_mlp(small[0], callbacks=[Checkpointer(tmp_path / "b"), Checkpointer(tmp_path / "c")])


def test_adam_resumed_on_more_devices_keeps_every_copy_equal(small, tmp_path):
    adam = dict(optimizer="adam", optimizer_params={"learning_rate": 0.01})
    full, _ = fit_mlp(small[0], epochs=3, **adam)
    fit_mlp(small[0], epochs=2, ctx=1, checkpoint_dir=tmp_path, **adam)
    resumed, _ = fit_mlp(small[0], epochs=3, ctx=2, checkpoint_dir=tmp_path, **adam)
    for p in resumed.collect_params().values():
        a, b = (d.asnumpy() for d in p.list_data())
        assert np.array_equal(a, b), p.name
    assert_same_params(resumed, full, 1e-4)


def test_checkpoint_of_another_model_is_refused(small, tmp_path):
    fit_on(None, small[0], epochs=1, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="checkpoint of a different model"):
        gluondist.fit(mlp(hidden=16), small[0], epochs=2, checkpoint_dir=tmp_path)


def test_foreign_checkpoint_message_suggests_what_works(small, tmp_path):
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="different model.*resume=False") as info:
        fit_mlp(small[0], net=mlp(hidden=16), checkpoint_dir=tmp_path)
    _, h = fit_mlp(small[0], epochs=1, net=mlp(hidden=16), checkpoint_dir=tmp_path, resume=False)
    assert len(h.history["loss"]) == 1 and "ckpt-000000" in str(info.value)


def test_a_checkpoint_of_another_optimizer_is_refused_before_training(small, tmp_path):
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    net = mlp()
    with pytest.raises(ValueError, match="state of a SGD optimizer, not Adam.*resume=False"):
        fit_mlp(small[0], net=net, checkpoint_dir=tmp_path, optimizer="adam",
                optimizer_params={"learning_rate": 0.01})


@pytest.mark.parametrize("earlier", [2, 3])
def test_a_checkpoint_of_an_earlier_format_is_refused_not_skipped(small, tmp_path, earlier):
    # formats 2 and 3 derived the per-epoch seeds differently: resuming would not replay the run
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    path = tmp_path / "ckpt-000000" / "state.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": earlier}))
    with pytest.raises(ValueError, match=r"ckpt-000000 was written by an earlier gluondist "
                                         rf"\(checkpoint format {earlier}.*pass resume=False"):
        fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    _, h = fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path, resume=False)
    assert len(h.history["loss"]) == 1


def test_a_checkpoint_opens_with_plain_mxnet(small, tmp_path):
    net, h = fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    newest = tmp_path / "ckpt-000001"
    state = json.loads((newest / "state.json").read_text())
    assert state["epoch"] == 1 and state["history"] == h.history
    fresh = mlp()
    fresh.load_parameters(str(newest / "net.params"))
    assert_same_params(fresh, net)
    momentum = mx.nd.load(str(newest / "trainer.states"))
    assert len(momentum) == len(net.collect_params().keys())  # one momentum per parameter


def test_a_planted_pickle_is_never_executed(small, tmp_path):
    ckpt, proof = tmp_path / "ckpt", tmp_path / "executed"
    fit_mlp(small[0], epochs=1, checkpoint_dir=ckpt)
    newest = ckpt / "ckpt-000000"
    for target in (ckpt / "epoch-0005.ckpt", newest / "trainer.states"):
        target.write_bytes(pickle.dumps(Planted(str(proof))))
    planted = ckpt / "ckpt-000009"  # a newer-looking checkpoint whose files are pickles
    planted.mkdir()
    (planted / "state.json").write_bytes(pickle.dumps(Planted(str(proof))))
    (planted / "net.params").write_bytes(pickle.dumps(Planted(str(proof))))
    net, h = fit_mlp(small[0], epochs=3, checkpoint_dir=ckpt)
    assert not proof.exists()
    assert len(h.history["loss"]) == 3  # nothing usable: started over


def test_unreadable_checkpoint_is_skipped_with_a_warning(small, tmp_path, caplog):
    fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    (tmp_path / "ckpt-000001" / "state.json").write_text("{not json")
    ckpt = checkpoint.load_latest(tmp_path)
    assert ckpt.epoch == 0
    assert "skipping checkpoint" in caplog.text and "ckpt-000001" in caplog.text


@pytest.mark.parametrize("edit", [
    lambda s: s.update(optimizer="sgd"), lambda s: s.update(optimizer={}),
    lambda s: s.update(rng={}), lambda s: s.update(history={"loss": 3}),
    lambda s: s.update(epoch=10 ** 30), lambda s: s.update(epoch=-1),
    lambda s: s.update(seed=2 ** 40), lambda s: s.update(history={"loss": [[]] * 2}),
    lambda s: s["optimizer"]["states"].update({"0": {"array": "nope"}}),
])
def test_malformed_checkpoints_are_skipped_not_crashed_on(small, tmp_path, caplog, edit):
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    state = json.loads((tmp_path / "ckpt-000000" / "state.json").read_text())
    edit(state)
    bad = tmp_path / "ckpt-000050"
    shutil.copytree(tmp_path / "ckpt-000000", bad)
    (bad / "state.json").write_text(json.dumps(state))
    _, h = fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    assert len(h.history["loss"]) == 2 and "skipping checkpoint" in caplog.text


def test_fifos_deep_json_and_odd_run_files_never_hang_or_crash(small, tmp_path, caplog):
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    os.mkfifo(_planted(tmp_path, "{}") / "net.params")
    fifo = tmp_path / "ckpt-000060"
    fifo.mkdir()
    os.mkfifo(fifo / "state.json")
    _planted_deep = tmp_path / "ckpt-000070"
    _planted_deep.mkdir()
    (_planted_deep / "state.json").write_text("[" * 100000 + "]" * 100000)
    (tmp_path / "run.json").write_text('{"first": Infinity}')
    _, h = fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    assert len(h.history["loss"]) == 2  # resumed epoch 0's checkpoint, skipping the rest
    assert "ignoring" in caplog.text and caplog.text.count("skipping checkpoint") == 3
    (tmp_path / "run.json").unlink()
    (tmp_path / "run.json").mkdir()
    with pytest.raises(ValueError, match="run.json is not a regular file; remove it"):
        fit_mlp(small[0], checkpoint_dir=tmp_path, resume=False)


def test_a_full_disk_names_the_checkpoint_and_keeps_the_earlier_ones(small, small_disk):
    class Fill(Callback):  # the disk fills up after the first checkpoint
        def on_epoch_begin(self, run, epoch):
            if epoch == 1:  # once the first one's background write is complete
                wait_until(lambda: (ckpt / "ckpt-000000").is_dir(), message="the first checkpoint")
                try:
                    with open(small_disk / "filler", "wb") as f:
                        f.write(b"\0" * (1 << 20))  # more than the disk holds
                except OSError:
                    pass  # full

    ckpt = small_disk / "ckpt"
    with pytest.raises(OSError, match=f"cannot write the checkpoint of epoch 2 to {ckpt}: no "
                                      "space left on device; the earlier checkpoints are kept"):
        fit_mlp(small[0], epochs=3, net=mlp(64), checkpoint_dir=ckpt, callbacks=[Fill()])
    assert os.listdir(ckpt) == ["ckpt-000000"]  # no temporary entry left
    assert gluondist.checkpoint.load_latest(ckpt).epoch == 0


def test_checkpoint_dir_that_is_a_file_says_so(small, tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="checkpoint_dir .*f is a file, not a directory"):
        fit_mlp(small[0], checkpoint_dir=tmp_path / "f")


def test_a_checkpoint_records_the_global_batch_and_one_without_it_is_said(small, tmp_path,
                                                                          capsys):
    fit_on(None, small[0], epochs=1, checkpoint_dir=tmp_path)  # batch 30, one process
    state = tmp_path / "ckpt-000000" / checkpoint.STATE
    saved = json.loads(state.read_text())
    assert saved["global_batch"] == 30
    del saved["global_batch"]  # as written before elastic jobs
    state.write_text(json.dumps(saved))
    capsys.readouterr()
    fit_on(None, small[0], epochs=2, checkpoint_dir=tmp_path)
    assert "fit: the checkpoint does not record its global batch (written before elastic " \
           "jobs): going on with batch_size 30 x 1 worker(s) = 30, which matches the run only " \
           "if it started with 1" in capsys.readouterr().err


def test_a_fixed_global_batch_is_split_into_slices_one_sample_apart():
    from gluondist.kvstore import ShardedBatchSampler
    slices = [list(ShardedBatchSampler(100, 32, 3, r, seed=1, global_batch_size=64).batches())
              for r in range(3)]
    first = [s[0][0] for s in slices]
    assert [len(f) for f in first] == [22, 21, 21]
    assert sorted(np.concatenate(first)) == sorted(
        next(ShardedBatchSampler(100, 64, seed=1).batches())[0])
    assert [len(s) for s in slices] == [2, 2, 2] and slices[0][1][1] == 36


def test_restore_net_refuses_another_models_checkpoint_in_one_line(small, tmp_path):
    """A hand-written loop's building block says what fit says of a foreign checkpoint,
    instead of a KeyError on the first name it lacks."""
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    other = mlp(hidden=16)
    other.initialize()
    other(mx.nd.zeros((1, 64)))
    with pytest.raises(ValueError, match=r"^\S+ckpt-000000 holds a checkpoint of a different "
                                         r"model \(parameters that differ: 0.bias \[32\] there, "
                                         r"\[16\] here, .*\); restore it into the model that "
                                         r"wrote it, or give this one a directory of its own$"):
        checkpoint.restore_net(checkpoint.load_latest(tmp_path), other)


def test_a_gluon_trainer_that_updates_inside_a_local_kvstore_is_refused_in_one_line(tmp_path):
    """MXNet's Trainer on two devices updates inside its 'device' kvstore by default, where a
    checkpoint cannot reach the optimizer's state: refused, rather than saved without it."""
    net = mx.gluon.nn.Dense(3, in_units=4)
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"momentum": 0.9},
                               kvstore="device")
    for ctx in (mx.cpu(0), mx.cpu(1)):
        with mx.autograd.record():
            loss = net(mx.nd.ones((2, 4), ctx=ctx)).sum()
        loss.backward()
    trainer.step(4)
    state = checkpoint.RunState(seed=0, signature=checkpoint.signature(net),
                                history={}, rng=checkpoint.rng_states(), callbacks={})
    with pytest.raises(ValueError, match="updates inside its 'device' kvstore.*"
                                         "update_on_kvstore=False"):
        checkpoint.save(tmp_path, 0, net, trainer, state)


def test_nadam_resumed_mid_epoch_equals_an_uninterrupted_run(small, tmp_path):
    """Nadam's momentum schedule (a product over every step, an attribute of the optimizer, not
    a state array) travels in the checkpoint: the resumed run ends bit-equal, array by array."""
    kw = dict(epochs=3, optimizer="nadam", optimizer_params={"learning_rate": 0.01})
    full, _ = fit_mlp(small[0], **kw)
    fit_mlp(small[0], checkpoint_dir=tmp_path, callbacks=[StopAt(1, 3)], **kw)
    resumed, _ = fit_mlp(small[0], checkpoint_dir=tmp_path, **kw)
    assert_same_params(resumed, full)
