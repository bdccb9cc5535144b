"""What fit shows a person, in one process: nothing with progress=False, each line once
when logging is configured, and one line for a finished run or epochs=0 (a script
without a terminal: e2e/test_fit_console_process.py)."""
import logging

import pytest

from conftest import fit_mlp


def test_a_resumed_run_that_had_finished_says_it_trains_nothing(small, tmp_path, capsys):
    fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    capsys.readouterr()
    _, h = fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    assert capsys.readouterr().err == (
        f"fit: the run in {tmp_path} had already trained 2 epoch(s) (epochs=2): nothing to "
        "train; raise epochs to train on, or pass resume=False to start over\n")
    assert h.epoch == [0, 1] and len(h.history["loss"]) == 2  # the run's History, restored
    _, h = fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path, resume=False)
    err = capsys.readouterr().err
    assert "fit:" not in err and err.count("epoch ") == 2 and h.epoch == [0, 1]


def test_epochs_0_trains_nothing_says_so_and_returns_an_empty_history(small, capsys):
    net, h = fit_mlp(small[0], epochs=0)
    assert capsys.readouterr().err == \
        "fit: epochs=0: nothing to train (the History returned is empty)\n"
    assert h.epoch == [] and h.history == {}
    with pytest.raises(ValueError, match="no epochs to plot"):
        h.plot()


def test_progress_false_shows_no_line_and_logs_none(small, capsys, caplog):
    caplog.set_level(logging.INFO, logger="gluondist")
    _, h = fit_mlp(small[0], epochs=2, progress=False)
    assert capsys.readouterr().err == "" and "epoch" not in caplog.text
    assert len(h.epoch) == 2


def test_configured_logging_shows_each_line_once_and_stderr_none(small, tmp_path, capsys,
                                                                  caplog):
    caplog.set_level(logging.INFO, logger="gluondist")
    fit_mlp(small[0], epochs=1, checkpoint_dir=tmp_path)
    fit_mlp(small[0], epochs=2, checkpoint_dir=tmp_path)
    assert capsys.readouterr().err == ""
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("gluondist.training")]
    assert lines[0].startswith("epoch 1/1: ") and lines[2].startswith("epoch 2/2: ")
    assert lines[1] == f"fit: resuming from {tmp_path} after epoch 1 of 2 (resume=False " \
                       "starts over)" and len(lines) == 3
