"""gluondist: distributed training for Apache MXNet Gluon, started with one command.

Attributes are imported lazily so that the launcher (and `gluondist --help`) start without
loading MXNet, which takes seconds.
"""
import importlib

__version__ = "0.1.0"
INSTALL_HINT = (
    "pip install 'gluondist[cpu]' (CPU) or 'gluondist[cu117]' (CUDA 11.7; see README for others)"
)
__all__ = ["fit", "launch", "LaunchOptions", "LaunchResult", "History", "Callback",
           "EarlyStopping", "ProgressBar", "EpochLogger", "Checkpointer", "SaveBest", "CSVLogger",
           "TensorBoard", "evaluate", "predict", "kvstore", "parallel", "recipes", "checkpoint"]

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
    "callbacks": ("gluondist.callbacks", None),  # a door to names already in __all__
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'gluondist' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return value if attr is None else getattr(value, attr)
