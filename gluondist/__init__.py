"""gluondist: distributed training for Apache MXNet Gluon, started with one command.

Attributes are imported lazily so that the launcher (and `gluondist --help`) start without
loading MXNet, which takes seconds.
"""
import importlib

__version__ = "0.1.0"


def extra_hint(extras: str) -> str:
    """The command that adds gluondist's ``extras`` (such as ``"plot"``): from a checkout, as
    gluondist is not on PyPI yet. (``pip install matplotlib`` alone could upgrade numpy past
    what MXNet 1.9.1 runs with; the extra keeps numpy < 1.24.)"""
    return (f"pip install '.[{extras}]' in a gluondist checkout; pip install "
            f"'gluondist[{extras}]' works only once gluondist is on PyPI, which it is not yet")


# What to run where MXNet is missing: from a checkout with the extra, or MXNet alone, which
# installs anywhere (tests/unit/test_install.py checks them against pyproject.toml).
INSTALL_HINT = (
    "pip install '.[cpu]' in a gluondist checkout ('.[cu117]' or '.[cu112]' for CUDA), or "
    "anywhere pip install mxnet==1.9.1 (CUDA: mxnet-cu117==1.9.1); pip install "
    "'gluondist[cpu]' works only once gluondist is on PyPI, which it is not yet"
)
# The MXNet whose private names gluondist._mx reads (and every job ran on): 1.9. At apache/mxnet's
# HEAD (2.x) Trainer._contexts is _devices and MXImperativeInvokeEx is gone.
MXNET_SUPPORTED = (1, 9)


def _tested(version: str) -> bool:
    """Whether MXNet ``version`` is of the series gluondist is tested with."""
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit()) == \
        MXNET_SUPPORTED


def mxnet_version_problem(version: str):
    """One line saying what to do when MXNet ``version`` is not :data:`MXNET_SUPPORTED` (and
    GLUONDIST_UNTESTED_MXNET is not 1), or None."""
    import os
    if _tested(version) or os.environ.get("GLUONDIST_UNTESTED_MXNET") == "1":
        return None
    return (f"gluondist is tested with MXNet {'.'.join(map(str, MXNET_SUPPORTED))}, not MXNet "
            f"{version}: install it ({INSTALL_HINT}), or set GLUONDIST_UNTESTED_MXNET=1 to "
            "run this one untested")


def mxnet_untested(version: str):
    """The warning for an MXNet other than :data:`MXNET_SUPPORTED` run with
    GLUONDIST_UNTESTED_MXNET=1, or None."""
    if _tested(version):
        return None
    return (f"MXNet {version} is untested with gluondist (tested: "
            f"{'.'.join(map(str, MXNET_SUPPORTED))}); GLUONDIST_UNTESTED_MXNET=1 runs it anyway")


__all__ = ["fit", "launch", "LaunchOptions", "LaunchResult", "History", "Callback",
           "EarlyStopping", "ProgressBar", "EpochLogger", "Checkpointer", "SaveBest", "CSVLogger",
           "TensorBoard", "evaluate", "predict", "kvstore", "parallel", "recipes", "checkpoint",
           "elastic", "sync_batchnorm", "plain_batchnorm"]

_LAZY = {
    "fit": ("gluondist.training.loop", "fit"),
    "History": ("gluondist.training.callbacks", "History"),
    "Callback": ("gluondist.training.callbacks", "Callback"),
    "EarlyStopping": ("gluondist.training.monitored", "EarlyStopping"),
    "ProgressBar": ("gluondist.training.callbacks", "ProgressBar"),
    "EpochLogger": ("gluondist.training.callbacks", "EpochLogger"),
    "Checkpointer": ("gluondist.training.callbacks", "Checkpointer"),
    "SaveBest": ("gluondist.training.monitored", "SaveBest"),
    "CSVLogger": ("gluondist.training.loggers", "CSVLogger"),
    "TensorBoard": ("gluondist.training.loggers", "TensorBoard"),
    "evaluate": ("gluondist.training.evaluation", "evaluate"),
    "predict": ("gluondist.training.evaluation", "predict"),
    "launch": ("gluondist.launcher.api", "launch"),
    "LaunchOptions": ("gluondist.launcher.options", "LaunchOptions"),
    "LaunchResult": ("gluondist.launcher.outcome", "LaunchResult"),
    "kvstore": ("gluondist.kvstore", None),
    "parallel": ("gluondist.parallel", None),
    "recipes": ("gluondist.recipes", None),
    "checkpoint": ("gluondist.checkpoint", None),
    "elastic": ("gluondist.elastic", None),
    "sync_batchnorm": ("gluondist.syncbn", "sync_batchnorm"),
    "plain_batchnorm": ("gluondist.syncbn", "plain_batchnorm"),
    "callbacks": ("gluondist.callbacks", None),  # a door to names already in __all__
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'gluondist' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return value if attr is None else getattr(value, attr)
