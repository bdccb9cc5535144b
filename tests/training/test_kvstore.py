"""gluondist.kvstore in one process: its place outside and inside a job, the kinds and their
refusals, the parameter-server recipe, and allreduce keys that stay on a server (with 3
and 4 servers in real jobs: e2e/test_kvstore_jobs.py)."""
import math

import mxnet as mx
import numpy as np
import pytest

from conftest import assert_same_params
from gluondist import envvars, kvstore, recipes


def test_outside_a_job_this_process_is_alone(monkeypatch):
    monkeypatch.delenv(envvars.DMLC_ROLE, raising=False)
    assert (kvstore.role(), kvstore.is_distributed(), kvstore.rank(), kvstore.num_workers()) == \
        (None, False, 0, 1)


def test_launched_worker_reads_its_place_from_the_environment(monkeypatch):
    monkeypatch.setenv(envvars.DMLC_ROLE, "worker")
    monkeypatch.setenv(envvars.DMLC_NUM_WORKER, "4")
    monkeypatch.setenv(envvars.GLUONDIST_RANK, "3")
    assert (kvstore.is_distributed(), kvstore.rank(), kvstore.num_workers()) == (True, 3, 4)
    assert kvstore.resolve_mode("auto") == "dist_sync"
    monkeypatch.setenv(envvars.GLUONDIST_KVSTORE, "dist_async")
    assert kvstore.resolve_mode("auto") == "dist_async"


def test_auto_kind_in_one_process(monkeypatch):
    monkeypatch.delenv(envvars.DMLC_ROLE, raising=False)
    assert kvstore.resolve_mode("auto", 1) is None
    assert kvstore.resolve_mode("auto", 2) == "device"
    assert kvstore.create("local").type == "local"
    assert kvstore.create("auto", 1) is None


def test_unknown_kind_lists_the_valid_ones():
    with pytest.raises(ValueError, match="dist_sync, dist_async, dist_device_sync"):
        kvstore.create("dist")


def test_dist_kind_outside_a_job_says_how_to_launch(monkeypatch):
    monkeypatch.delenv(envvars.DMLC_ROLE, raising=False)
    with pytest.raises(RuntimeError, match="gluondist launch"):
        kvstore.create("dist_sync")


def test_parameter_server_recipe_trains_in_one_process(digits):
    import mxnet as mx
    X, y = digits
    losses = recipes.train_parameter_server(mx.gluon.nn.Dense(10), X, y, epochs=3,
                                            batch_size=32,
                                            optimizer_params={"learning_rate": 0.5})
    assert len(losses) == 3 and losses[-1] < losses[0] * 0.5


def _server_index(key, servers):
    """What MXNet 1.9.1 computes for a small array's server: (key * 9973) % servers in a C int
    (C's % keeps the dividend's sign)."""
    product = (key * 9973) & 0xFFFFFFFF
    product -= (1 << 32) if product >= 1 << 31 else 0
    return int(math.fmod(product, servers))


def test_allreduce_keys_stay_on_a_server_for_any_length():
    # 2**30 + 107,665, the key the old scheme gave 107,665 values, is where the index turns
    # negative: the model of MXNet's arithmetic must see that.
    assert _server_index((1 << 30) + 107_665, 3) < 0
    for n in (1, 2, kvstore.REDUCE_CHUNK, kvstore.REDUCE_CHUNK + 1, 107_665, 120_002,
              10 ** 7, kvstore.MAX_REDUCE):
        keys = kvstore.reduce_keys(n)
        assert len(keys) * kvstore.REDUCE_CHUNK >= n and len(set(keys)) == len(keys)
        assert keys == [(1 << 30) + n] or n > kvstore.REDUCE_CHUNK
        for key in keys[:3] + keys[-3:]:
            assert key < 2 ** 31 and all(_server_index(key, s) >= 0 for s in range(1, 65))
    with pytest.raises(ValueError, match="at most"):
        kvstore.reduce_keys(kvstore.MAX_REDUCE + 1)




def test_an_inference_pass_leaves_a_convolution_weight_that_default_layout_restores():
    """The cause of the conv nets' server abort, and its fix (e2e/test_models.py trains them):
    the kvstore, like DLPack, reads an array's raw bytes, which MXNet refuses for a weight
    that an inference pass left in oneDNN's layout; default_layout puts it back, values kept."""
    import mxnet as mx
    import numpy as np
    from gluondist._mx import default_layout
    if not mx.runtime.Features().is_enabled("MKLDNN"):
        pytest.skip("this MXNet has no oneDNN: its weights keep the default layout")
    conv = mx.gluon.nn.Conv2D(16, 3, in_channels=16)
    conv.initialize()
    before = conv.weight.data().asnumpy()
    conv(mx.nd.ones((1, 16, 8, 8))).wait_to_read()  # outside autograd.record()
    weight = conv.weight.data()
    with pytest.raises(mx.MXNetError, match="MKLDNN"):
        weight.to_dlpack_for_read()
    default_layout([weight])
    weight.to_dlpack_for_read()
    assert np.array_equal(weight.asnumpy(), before)
    for _ in range(20):  # an inference pass still queued: its reorder is waited for too
        conv(mx.nd.ones((1, 16, 8, 8)))
        default_layout([weight])
        weight.to_dlpack_for_read()


def _adam_steps(trainer, net, ctxs, steps, seed):
    rs = np.random.RandomState(seed)
    for _ in range(steps):
        x = rs.rand(8, 5).astype("f")
        for part, ctx in zip(np.split(x, len(ctxs)), ctxs):
            with mx.autograd.record():
                loss = (net(mx.nd.array(part, ctx=ctx)) ** 2).sum()
            loss.backward()
        trainer.step(8)


def _trained(ctxs, steps=2, optimizer="adam"):
    mx.random.seed(3)
    net = mx.gluon.nn.Dense(3, in_units=5)
    net.initialize(mx.init.Xavier(), ctx=ctxs)
    trainer = kvstore.make_trainer(net.collect_params(), optimizer, {"learning_rate": 0.01,
                                   "lr_scheduler": mx.lr_scheduler.FactorScheduler(2, 0.5)})
    _adam_steps(trainer, net, ctxs, steps, 0)
    return net, trainer


@pytest.mark.parametrize("optimizer", ["adam", "nadam"])  # nadam: its momentum schedule
def test_saved_trainer_states_resume_exactly_and_hold_no_pickle(tmp_path, optimizer):
    """make_trainer's save_states: states, update counts, the optimizer's type and plain
    attributes as arrays and JSON (mx.nd.load reads it; no pickle), and a trainer that loads
    them steps on as the one that wrote them, array by array, on two devices (which
    make_trainer finds on the parameters: their copies are summed)."""
    ctxs = [mx.cpu(0), mx.cpu(1)]
    net, trainer = _trained(ctxs, optimizer=optimizer)
    trainer.save_states(str(tmp_path / "states"))
    assert (tmp_path / "states").read_bytes()[:1] != b"\x80"  # a pickle's first opcode
    assert set(mx.nd.load(str(tmp_path / "states"))) >= {"0.0", "0.1", "gluondist.states"}
    other, resumed = _trained(ctxs, steps=0, optimizer=optimizer)
    for mine, theirs in zip(net.collect_params().values(), other.collect_params().values()):
        for ctx in ctxs:
            theirs.data(ctx)[:] = mine.data(ctx)
    resumed.load_states(str(tmp_path / "states"))
    _adam_steps(trainer, net, ctxs, 3, 1)
    _adam_steps(resumed, other, ctxs, 3, 1)
    for (name, a), b in zip(net.collect_params().items(), other.collect_params().values()):
        for ctx in ctxs:
            assert np.array_equal(a.data(ctx).asnumpy(), b.data(ctx).asnumpy()), name
    assert resumed.optimizer.num_update == trainer.optimizer.num_update == 5


def test_loading_another_optimizers_states_is_one_line(tmp_path):
    _, trainer = _trained([mx.cpu()])
    trainer.save_states(str(tmp_path / "states"))
    net = mx.gluon.nn.Dense(3, in_units=5)
    net.initialize()
    sgd = kvstore.make_trainer(net.collect_params(), "sgd", kvstore=None)
    with pytest.raises(ValueError, match="holds the state of a Adam optimizer, not SGD"):
        sgd.load_states(str(tmp_path / "states"))
    mx.nd.save(str(tmp_path / "other"), {"x": mx.nd.ones(1)})
    with pytest.raises(ValueError, match="holds no trainer states written by gluondist's"):
        sgd.load_states(str(tmp_path / "other"))
    (tmp_path / "garbage").write_bytes(b"not an MXNet file")
    for name in ("garbage", "missing"):
        with pytest.raises(ValueError, match=f"cannot read trainer states from .*{name}"):
            sgd.load_states(str(tmp_path / name))
    wide = mx.gluon.nn.Dense(4, in_units=5)  # Adam too, but another net: refused, unchanged
    wide.initialize()
    adam = kvstore.make_trainer(wide.collect_params(), "adam", kvstore=None)
    with pytest.raises(ValueError, match=r"state of parameter 0 \(.*\) holds \[\(3, 5\) float32"):
        adam.load_states(str(tmp_path / "states"))
    assert adam.optimizer.num_update == 0


def test_load_states_restores_the_learning_rate_as_gluons_does(tmp_path):
    net = mx.gluon.nn.Dense(3, in_units=5)
    net.initialize()
    trainer = kvstore.make_trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                   kvstore=None)
    trainer.set_learning_rate(0.001)
    trainer.save_states(str(tmp_path / "states"))
    fresh = kvstore.make_trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                 kvstore=None)
    fresh.load_states(str(tmp_path / "states"))
    assert fresh.learning_rate == 0.001


def test_amp_loss_scaling_is_refused_by_step_and_trainstep():
    net = mx.gluon.nn.Dense(3, in_units=5)
    net.initialize()
    trainer = kvstore.make_trainer(net.collect_params(), "sgd", kvstore=None)
    step = kvstore.TrainStep(trainer, None, [mx.cpu()], 4)
    trainer._amp_loss_scaler = object()  # what amp.init_trainer(trainer) sets
    with mx.autograd.record():
        loss = net(mx.nd.ones((4, 5))).sum()
    loss.backward()
    for attempt in (lambda: trainer.step(4), lambda: step(4)):
        with pytest.raises(ValueError, match="AMP's loss scaling .* is not supported"):
            attempt()


def test_trainstep_refuses_a_kvstore_other_than_the_trainers():
    net = mx.gluon.nn.Dense(3, in_units=5)
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    trainer = kvstore.make_trainer(net.collect_params(), "sgd")  # sums the two copies
    assert trainer.exchange.kv.type == "device"
    with pytest.raises(ValueError, match="given kvstore 'None', and the trainer exchanges "
                                         "through 'device'"):
        kvstore.TrainStep(trainer, None, [mx.cpu(0), mx.cpu(1)], 4)
    alone = kvstore.make_trainer(net.collect_params(), "sgd", kvstore=None)
    with pytest.raises(ValueError, match="given kvstore 'device', and the trainer exchanges "
                                         "through None"):
        kvstore.TrainStep(alone, mx.kv.create("device"), [mx.cpu(0), mx.cpu(1)], 4)


def test_nadams_copies_on_two_devices_stay_those_of_one_device():
    """Nadam's momentum schedule lives on the optimizer, which every device's updater shares:
    each copy's update starts from the step's schedule, so the copies stay equal, and equal to
    one device's (within the order of the two parts' sums)."""
    def run(ctxs):
        net, _ = _trained(ctxs, steps=4, optimizer="nadam")
        return net
    one, two = run([mx.cpu()]), run([mx.cpu(0), mx.cpu(1)])
    for (name, a), b in zip(one.collect_params().items(), two.collect_params().values()):
        assert np.array_equal(b.data(mx.cpu(0)).asnumpy(), b.data(mx.cpu(1)).asnumpy()), name
        np.testing.assert_allclose(b.data(mx.cpu(0)).asnumpy(), a.data().asnumpy(),
                                   rtol=1e-5, atol=1e-7, err_msg=name)


def test_make_trainer_refuses_no_parameters_and_an_unwritable_file_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="make_trainer got no parameters"):
        kvstore.make_trainer([], "sgd", kvstore=None)
    _, trainer = _trained([mx.cpu()], steps=1)
    with pytest.raises(ValueError, match="set_learning_rate with an lr_scheduler"):
        trainer.set_learning_rate(0.5)
    with pytest.raises(OSError, match="cannot write trainer states to .*missing/states"):
        trainer.save_states(str(tmp_path / "missing" / "states"))
    (tmp_path / "pickle").write_bytes(b"\x80\x04junk")
    with pytest.raises(ValueError, match="holds no trainer states .*pickles"):
        trainer.load_states(str(tmp_path / "pickle"))
    with pytest.raises(ValueError, match=r"from .*nothing here \(no such file or directory\)"):
        trainer.load_states(str(tmp_path / "nothing here"))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_row_sparse_gradients_on_two_devices_compute_one_devices(optimizer):
    """An Embedding(sparse_grad=True) on cpu(0) and cpu(1), each half of every batch: the
    union of the rows the halves touched, each summed (a job sums the workers' the same way:
    e2e/test_sparse_jobs.py), then MXNet's lazy update, as one device with the whole batch."""
    X = np.random.RandomState(0).randint(0, 50, (24, 3)).astype(np.float32)
    found = []
    for ctxs in ([mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]):
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Embedding(50, 4, sparse_grad=True), mx.gluon.nn.Dense(2))
        mx.random.seed(1)
        net.initialize(mx.init.Normal(0.1), ctx=ctxs)
        net(mx.nd.array(X[:1], ctx=ctxs[0]))
        trainer = kvstore.make_trainer(net.collect_params(), optimizer,
                                       {"learning_rate": 0.1}, num_contexts=len(ctxs))
        for batch in (X[:12], X[12:]):
            parts = mx.gluon.utils.split_and_load(batch, ctxs)
            with mx.autograd.record():
                losses = [(net(x) ** 2).sum() for x in parts]
            mx.autograd.backward(losses)
            trainer.step(len(batch))
        found.append({k: p.data(ctxs[0]).asnumpy()
                      for k, p in net._collect_params_with_prefix().items()})
    assert_same_params(found[1], found[0], rtol=1e-6)  # float32: the halves' sums rounded
    assert kvstore.NODE.union(np.array([5, 2, 5])).tolist() == [2, 5]  # outside a job


def test_accumulating_row_sparse_gradients_is_refused_in_one_line():
    """MXNet's sparse Embedding writes its gradient only: accumulate=k would fail inside it."""
    import gluondist
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Embedding(50, 4, sparse_grad=True), mx.gluon.nn.Dense(2))
    X, y = np.zeros((16, 3), np.float32), np.zeros(16, np.float32)
    with pytest.raises(ValueError, match=r"^accumulate=2 adds gradients over batches, and "
                                         r"\w+_weight's are row-sparse"):
        gluondist.fit(net, (X, y), batch_size=4, accumulate=2, progress=False)


def test_row_sparse_weights_are_refused_in_one_line():
    param = mx.gluon.Parameter("w", shape=(10, 4), stype="row_sparse", grad_stype="row_sparse")
    param.initialize(ctx=mx.cpu())
    with pytest.raises(ValueError, match=r"^parameter w has row_sparse weights, which "
                                         r"gluondist's trainers cannot hold"):
        kvstore.make_trainer([param], "sgd")
