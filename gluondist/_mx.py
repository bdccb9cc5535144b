"""Import MXNet once, with an error that says how to install it."""

from . import INSTALL_HINT

try:
    import mxnet as mx  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without MXNet
    raise ImportError(f"gluondist needs MXNet, which failed to import ({exc}); "
                      f"install it: {INSTALL_HINT}") from exc
