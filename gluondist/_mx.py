"""Import MXNet once, with an error that says how to install it; the one call of MXNet's C API
that puts an array back in its default memory layout (:func:`default_layout`)."""
import ctypes

from . import INSTALL_HINT

try:
    import mxnet as mx  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without MXNet
    raise ImportError(f"gluondist needs MXNet, which failed to import ({exc}); "
                      f"install it: {INSTALL_HINT}") from exc

_GPU = 2  # mx.Context.devstr2type["gpu"]


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
    for array in arrays:
        mx.base.check_call(mx.base._LIB.MXNDArrayGetData(array.handle, ctypes.byref(pointer)))
