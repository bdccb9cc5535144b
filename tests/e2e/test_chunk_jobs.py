"""Chunked gradients, and small ones fused, in real 2-worker jobs: bit-equal to sending each
whole on its own key (the chunking itself, in one process, is training/test_chunks.py)."""
import json

import numpy as np

from conftest import SCRIPTS


def test_chunked_training_is_bit_equal_to_whole(launch, tmp_path):
    """Two workers, two servers (the chunks spread over both), two fits whole and then two in
    69 chunks (the default's 2 take the same path) in one job, each fit on keys of its own."""
    job = launch("-n", 2, "-s", 2, SCRIPTS / "chunked_job.py", tmp_path, "0", "16384")
    assert job.wait(timeout=180) == 0, job.err
    found = {chunk: dict(np.load(tmp_path / f"params.{chunk}.npz")) for chunk in ("0", "16384")}
    assert len(found["0"]) == 8 and found["16384"].keys() == found["0"].keys()
    for name, value in found["0"].items():
        assert np.array_equal(found["16384"][name], value), name


def test_fused_small_gradients_train_bit_equal_to_each_on_its_own(launch, tmp_path):
    """MobileNetV2 0.25 (BatchNorm, 160 arrays: most of them fused), an LSTM and an MLP, by fit
    and by a loop of one's own, fused (the default) and with GLUONDIST_FUSE_BYTES=0, in one
    job of two workers and two servers."""
    job = launch("-n", 2, "-s", 2, SCRIPTS / "fused_job.py", tmp_path)
    assert job.wait(timeout=300) == 0, job.err
    alone, fused = (dict(np.load(tmp_path / f"params.{f}.npz")) for f in ("0", "default"))
    assert sorted(fused) == sorted(alone) and len(alone) > 250
    said = {f: (tmp_path / f"fused.{f}").read_text() for f in ("0", "default")}
    assert said["0"] == "0 of 266", said  # 160 trained arrays, 106 BatchNorm statistics
    assert int(said["default"].split()[0]) > 100, said
    for name, value in alone.items():
        assert np.array_equal(fused[name], value), name
    for rank in range(2):  # then worker 1 set another GLUONDIST_FUSE_BYTES than worker 0
        assert (tmp_path / f"differ.{rank}").read_text() == (
            "workers fuse small gradients up to different sizes (GLUONDIST_FUSE_BYTES, "
            "chunk_bytes); every worker of a job must run the same training calls in order, "
            "with the same settings")


def test_the_order_the_job_chooses_trains_bit_equal_to_backward_order(launch, tmp_path):
    """ResNet-18 v1 (by fit and by a loop of one's own), an LSTM and an MLP, 5 steps each in
    16 KiB chunks, in one job of two workers and two servers: in backward's order throughout,
    then timed at steps 3 and 4 (every worker's times gathered) and sent in the mixed order after it."""
    job = launch("-n", 2, "-s", 2, SCRIPTS / "order_job.py", tmp_path)
    assert job.wait(timeout=600) == 0, job.err
    back, chosen = (dict(np.load(tmp_path / f"params.{r}.npz")) for r in ("backward", "chosen"))
    assert sorted(chosen) == sorted(back) and len(back) > 100
    for name, value in back.items():
        assert np.array_equal(chosen[name], value), name
    for rank in range(2):
        assert (tmp_path / f"heads.backward.{rank}").read_text() == ""  # no step timed
        heads = (tmp_path / f"heads.chosen.{rank}").read_text().split()
        assert len(heads) == 4 and all(0 < float(h) <= 1 for h in heads), heads
    # every worker chose the same heads, from the same gathered times
    assert (tmp_path / "heads.chosen.0").read_text() == (tmp_path / "heads.chosen.1").read_text()
    # the last step issued the parameters last first throughout, then (the head at 40%) last
    # first and then first first
    for rank in range(2):
        back, chosen = (json.loads((tmp_path / f"issued.{r}.{rank}.json").read_text())
                        for r in ("backward", "chosen"))
        assert sorted(back) == sorted(chosen) == ["lstm.fit", "mlp.fit", "resnet18_v1.fit",
                                                  "resnet18_v1.loop"]
        for net, order in back.items():
            assert order == sorted(order, reverse=True) and len(order) > 1, (net, order)
            turn = next(k for k in range(1, len(chosen[net]))
                        if chosen[net][k] > chosen[net][k - 1])
            head, rest = chosen[net][:turn], chosen[net][turn - 1:]
            assert head == sorted(head, reverse=True) and rest == sorted(rest), (net, chosen)
            assert head[0] == order[0] and sorted(chosen[net]) == sorted(order), (net, chosen)
