"""What this machine has for gluondist (``gluondist env``): Python, numpy, MXNet's version
and build features, GPUs and cores, and the one problem found first."""
import os
import platform
import sys
from typing import Callable, Optional

from . import INSTALL_HINT, mxnet_untested, mxnet_version_problem


def describe(echo: Callable[[str], None]) -> Optional[str]:
    """Each line through ``echo``; returns one line saying what is wrong, or None."""
    echo(f"python     {platform.python_version()} ({sys.executable})")
    try:
        import numpy
        echo(f"numpy      {numpy.__version__}")
    except ImportError:
        echo("numpy      missing")
    try:
        import mxnet as mx
    except ImportError as exc:
        return f"MXNet does not import ({exc}); install it: {INSTALL_HINT}"
    features = mx.runtime.Features()
    flags = {name: features.is_enabled(name) for name in ("DIST_KVSTORE", "CUDA", "NCCL", "MKLDNN")}
    echo(f"mxnet      {mx.__version__} ({os.path.dirname(mx.__file__)})")
    echo("features   " + "  ".join(f"{k}={'yes' if v else 'no'}" for k, v in flags.items()))
    echo(f"gpus       {mx.context.num_gpus()}")
    echo(f"cores      {os.cpu_count()}")
    if not flags["DIST_KVSTORE"]:
        return ("this MXNet build lacks DIST_KVSTORE, which parameter-server jobs need; "
                f"install one that has it: {INSTALL_HINT}")
    problem, untested = mxnet_version_problem(mx.__version__), mxnet_untested(mx.__version__)
    if problem is None and untested:  # GLUONDIST_UNTESTED_MXNET=1
        echo(f"warning    {untested}")
    return problem
