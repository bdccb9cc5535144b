"""Where gluondist meets MXNet below its public door, for the training side (the worker's
process): MXNet imported once, its version checked, and every private attribute of MXNet's
classes and every call into libmxnet that training still needs, each named once here.

Two more modules meet MXNet so, each for a process of its own, as CONTRIBUTING lists:
:mod:`gluondist.launcher.child.server` (the server process, which runs MXNet's C server loop
without importing mxnet) and :mod:`gluondist.launcher.child.bootstrap` (a role's start and
exit). tests/unit/test_boundary.py reads the code and fails when one appears anywhere else.

What each is kept for is said beside it; where a public call did the job it is used instead
(``kv.pushpull``, ``mx.optimizer.get_updater``, ``Block.collect_params``)."""
import contextlib
import ctypes
import warnings
from array import array

from . import INSTALL_HINT, mxnet_untested, mxnet_version_problem

try:
    import mxnet as mx  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without MXNet
    raise ImportError(f"gluondist needs MXNet, which failed to import ({exc}); "
                      f"install it: {INSTALL_HINT}") from exc

_problem = mxnet_version_problem(mx.__version__)
if _problem:
    raise ImportError(_problem)
_untested = mxnet_untested(mx.__version__)
if _untested:
    warnings.warn(_untested, stacklevel=2)

_LIB, _check_call = mx.base._LIB, mx.base.check_call
_GPU = 2  # mx.Context.devstr2type["gpu"]


# Arrays and parameters

def default_layout(arrays) -> None:
    """Put every dense CPU array of ``arrays`` in MXNet's default memory layout, in place.

    MXNet's CPU builds (oneDNN, formerly MKLDNN) let an inference forward pass, one outside
    ``autograd.record()``, reorder a ``Conv2D``'s, ``Conv2DTranspose``'s or ``Dense``'s weight
    in place into a blocked oneDNN layout for the next inference (mkldnn_convolution.cc; a
    training forward puts it back, with a TODO that "kvstore doesn't handle MKLDNN"). The
    distributed kvstore sends an array's raw bytes (``NDArray::data()`` in kvstore_dist.h), which
    refuses such an array inside the engine's thread: worker 0's push of the initial weights is
    dropped with no error, and the server aborts at the first gradient ("init 0 first"). A view
    (``reshape``, a slice) of such an array reads the blocked bytes as if they were in order.

    ``MXNDArrayGetData``, the public C call behind an array's data pointer, reorders an array in
    oneDNN layout back in place (c_api.cc). The inference reorder is queued in MXNet's engine by
    the convolution while it runs, and the convolution only reads the weight, so waiting for
    the weight's writes can return before either: every queued operation is waited for first
    (a wait for each weight let a ResNet loop's reorder land after it, and the server aborted).
    Call this before weights meet the kvstore (gluondist.devices.settle, from make_trainer), not
    on every gradient of every step."""
    arrays = [a for a in arrays if a.stype == "default" and a.context.device_typeid != _GPU]
    if not arrays:
        return
    mx.nd.waitall()
    pointer = ctypes.c_void_p()
    for each in arrays:
        _check_call(_LIB.MXNDArrayGetData(each.handle, ctypes.byref(pointer)))


def fresh(weight) -> bool:
    """Whether backward wrote ``weight``'s gradient since its last update (the flag
    ``Trainer`` reads to refuse a stale gradient; no public reader)."""
    return weight._fresh_grad


def mark_updated(weight) -> None:
    weight._fresh_grad = False


def deferred(param) -> bool:
    """Whether ``param`` waits for its first forward pass to learn its shape."""
    return bool(param._deferred_init)


def initialised(param) -> bool:
    """Whether ``param`` holds arrays now (neither uninitialised nor deferred)."""
    return param._data is not None and not param._deferred_init


def storage(param) -> tuple:
    """``(stype, grad_stype)`` of ``param`` as it was made (no public reader before its
    arrays exist)."""
    return param._stype, param._grad_stype


def whole_value(param):
    """A sparse parameter's whole value (Parameter._reduce: what save_parameters writes)."""
    return param._reduce()


def named_parameters(block) -> dict:
    """``block``'s parameters by their structural names (``"0.weight"``), the names
    ``save_parameters`` writes; ``collect_params()`` keys them by global names, which change
    with how many layers the process made before."""
    return block._collect_params_with_prefix()


def children(block) -> list:
    """``block``'s child blocks, in order (Sequential alone has a public way)."""
    return list(block._children.values())


def replace_child(parent, old, new) -> None:
    """Put block ``new`` where ``old`` is among ``parent``'s children (under the same name, so
    parameter names by structure stay), hybridized as ``old`` was."""
    for name, child in parent._children.items():
        if child is old:
            parent._children[name] = new
    for attr, value in list(vars(parent).items()):
        if value is old:  # Block.__setattr__ refuses a change of type
            parent.__dict__[attr] = new
        elif isinstance(value, list):  # children kept in a list and registered by hand
            value[:] = [new if v is old else v for v in value]
        elif isinstance(value, tuple) and any(v is old for v in value):
            parent.__dict__[attr] = tuple(new if v is old else v for v in value)
    if getattr(old, "_active", False):
        new.hybridize(True, **dict(old._flags))


def forget_graphs(block) -> None:
    """Make every hybridized block below ``block`` trace its graph again at its next call."""
    if isinstance(block, mx.gluon.HybridBlock):
        block._clear_cached_op()
    for child in block._children.values():
        forget_graphs(child)


def traced(block):
    """What :func:`retrace` needs to trace ``block``'s graph again as its last call did (its
    symbolic inputs and their nesting), or None where it has no graph."""
    if not isinstance(block, mx.gluon.HybridBlock) or not block._cached_graph:
        return None
    return block._cached_graph[0], block._in_format


def retrace(block, inputs) -> None:
    """Trace ``block``'s graph again from ``inputs`` (:func:`traced`'s, taken before
    :func:`forget_graphs`), so that ``export`` writes the block as it is now, with no call in
    between; None: nothing to do."""
    if inputs is None:
        return
    symbols, fmt = inputs
    given = iter(symbols)

    def leaves(f):  # the flat arguments: None where the call passed None
        if isinstance(f, int):
            return [None] if f == -1 else [next(given)]
        return [leaf for g in f for leaf in leaves(g)]
    # the graph and the parameters export writes (_cached_op_args); the next call runs it
    block._build_cache(*mx.gluon.block._regroup(leaves(fmt), fmt))


def is_batchnorm(block) -> bool:
    """Whether ``block`` is one of MXNet's BatchNorm layers or derives from their base."""
    return isinstance(block, mx.gluon.nn.basic_layers._BatchNorm)


def batchnorm_settings(block) -> dict:
    """A BatchNorm's operator settings (axis, eps, momentum, fix_gamma, use_global_stats)."""
    return dict(block._kwargs)


def own_parameter_names(block) -> set:
    """The names of the parameters ``hybrid_forward`` receives as arguments."""
    return set(getattr(block, "_reg_params", {}))


def loss_axis(loss) -> int:
    """The ``axis`` a softmax cross-entropy loss was made with (MXNet keeps it private)."""
    return getattr(loss, "_axis", -1)


def sparse_label(loss) -> bool:
    """Whether a softmax cross-entropy loss takes class indices (``sparse_label``)."""
    return getattr(loss, "_sparse_label", True)


# Trainer and optimizer

class Trainer(mx.gluon.Trainer):
    """``gluon.Trainer``, whose parameters may each live on one context of their own (a
    pipeline's stages): MXNet's check wants every parameter on the same contexts. Its step is
    gluondist's (:class:`gluondist.kv.trainer.Trainer`); what it keeps of MXNet's is the
    optimizer, made from the name and settings as MXNet makes it, and the methods users call."""

    def _check_contexts(self):
        each = [p.list_ctx() for p in self._params]
        if all(c == each[0] for c in each) or not all(len(c) == 1 for c in each):
            return super()._check_contexts()
        return each[0]


def trainer_params(trainer) -> list:
    """Any ``gluon.Trainer``'s parameters, in its order (no public reader)."""
    return trainer._params


def trainer_updaters(trainer) -> list:
    """A plain ``gluon.Trainer``'s updaters, one per context (checkpoints read and restore
    their states)."""
    return trainer._updaters


def kvstore_updating(trainer):
    """The type of a plain ``gluon.Trainer``'s kvstore where that kvstore runs the optimizer
    (dist_async's servers, or MXNet's own choice for a local one), else None."""
    kv = trainer._kvstore
    return kv.type if kv is not None and trainer._update_on_kvstore else None


def grad_scale(trainer) -> float:
    """What a step multiplies the gradients by before dividing by the batch size: the
    optimizer's ``rescale_grad`` when the trainer was made, or AMP's while it scales the
    loss."""
    return trainer._scale


def loss_scaler(trainer):
    """AMP's loss scaler (``amp.init_trainer``), or None: a step with an overflow is skipped."""
    return getattr(trainer, "_amp_loss_scaler", None)


def count_tables(optimizer) -> dict:
    """The optimizer's update counts, one table ``{index: count}`` per device id: they drive
    learning-rate schedules and Adam's bias correction, and no public call reads or sets
    them."""
    return optimizer._all_index_update_counts


def set_count_tables(optimizer, tables: dict) -> None:
    """Give the optimizer ``tables`` (see :func:`count_tables`), the first one current."""
    optimizer._all_index_update_counts = tables
    optimizer._index_update_count = next(iter(tables.values()))


def count_for(optimizer, device_id: int) -> None:
    """Count the next updates in device ``device_id``'s table (what ``Updater`` does before
    an update; needed where the optimizer's update is called directly)."""
    optimizer._set_current_context(device_id)


@contextlib.contextmanager
def counts_kept(optimizer, index: int):
    """Updates of ``index`` in this block leave its update count where it was."""
    counts, num = optimizer._index_update_count, optimizer.num_update
    before = counts.get(index)
    try:
        yield
    finally:
        if before is None:
            counts.pop(index, None)
        else:
            counts[index] = before
        optimizer.num_update = num


# KVStore

def barrier(kv) -> None:
    """Every worker of the job waits here (KVStore._barrier; MXNet's own is private)."""
    kv._barrier()


class Copy:
    """``src.copyto(dst)``, issued to MXNet's engine each time it is called, its C arguments
    built once.

    MXNet 1.9.1's Python builds a call's C arguments anew each time: ``NDArray.copyto`` the arrays
    of handles, a check of each array's type and the operator's keyword strings, and
    ``KVStore.pushpull`` the arrays of keys and handles. That costs more than the call: at 64 KiB
    chunks a worker spent 6.7 ms of Python a step issuing a net's 130 chunks (128 of them an 8 MB
    layer's; two copies and a pushpull each) through them, 4.4 ms this way
    (benchmarks/issue_cost.py), and in a job the workers do it all at once, beside their
    backward passes, on the hosts' cores."""

    __slots__ = ("src", "dst", "_inputs", "_outputs", "_count", "_stypes")
    _OP = ctypes.c_void_p()  # MXNet's _copyto operator, what NDArray.copyto runs
    _check_call(_LIB.NNGetOpHandle(mx.base.c_str("_copyto"), ctypes.byref(_OP)))

    def __init__(self, src, dst):
        self.src, self.dst = src, dst  # kept: the handles below are theirs
        self._inputs = mx.base.c_handle_array([src])
        self._outputs = ctypes.cast(mx.base.c_handle_array([dst]),
                                    ctypes.POINTER(mx.base.NDArrayHandle))
        self._count = ctypes.c_int(1)
        self._stypes = ctypes.POINTER(ctypes.c_int)()

    def __call__(self) -> None:
        _check_call(_LIB.MXImperativeInvokeEx(
            self._OP, 1, self._inputs, ctypes.byref(self._count),
            ctypes.byref(self._outputs), 0, None, None, ctypes.byref(self._stypes)))


class PushPull:
    """``kv.pushpull(key, values, out=values)`` for one integer key and its arrays (one per
    device), its C arguments built once (see :class:`Copy`)."""

    __slots__ = ("kv", "values", "_keys", "_handles", "_count")

    def __init__(self, kv, key: int, values):
        self.kv, self.values = kv, list(values)
        self._count = mx.base.mx_uint(len(self.values))
        self._keys = mx.base.c_array_buf(ctypes.c_int, array("i", [key] * len(self.values)))
        self._handles = mx.base.c_handle_array(self.values)

    def __call__(self, priority: int) -> None:
        _check_call(_LIB.MXKVStorePushPull(self.kv.handle, self._count, self._keys, self._count,
                                           self._keys, self._handles, self._handles,
                                           ctypes.c_int(priority)))


# DataLoader

def loader_parts(loader) -> dict:
    """What a ``DataLoader`` was made with and keeps private: ``dataset``, ``batch_sampler``,
    ``batchify_fn``, ``num_workers``."""
    return {"dataset": loader._dataset, "batch_sampler": loader._batch_sampler,
            "batchify_fn": loader._batchify_fn, "num_workers": loader._num_workers}


def batch_sampler_parts(batch_sampler) -> dict:
    """What a ``BatchSampler`` was made with: ``sampler``, ``batch_size``, ``last_batch`` (a
    sampler of another kind has none of them)."""
    return {"sampler": getattr(batch_sampler, "_sampler", None),
            "batch_size": getattr(batch_sampler, "_batch_size", None),
            "last_batch": getattr(batch_sampler, "_last_batch", "keep")}


def array_dataset_arrays(dataset) -> list:
    """The arrays an ``ArrayDataset`` was made of."""
    return dataset._data


def borrow_loader(loader, batch_sampler):
    """``loader``'s batches drawn by ``batch_sampler`` instead of its own, so that its worker
    pool (made with the loader; a new ``DataLoader`` would start another) does the work. The
    loader's own sampler is back as soon as the pass has started (MXNet reads it once, when the
    pass begins)."""
    own = loader._batch_sampler
    loader._batch_sampler = batch_sampler
    try:
        batches = iter(loader)
        first = next(batches, None)
    finally:
        loader._batch_sampler = own
    if first is not None:
        yield first
        yield from batches
