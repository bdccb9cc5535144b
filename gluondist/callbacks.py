"""Every built-in callback in one import (``from gluondist.callbacks import EarlyStopping``); they
live in gluondist.training, beside the loop that calls them."""
from .training.callbacks import Callback, Checkpointer, EpochLogger, History, ProgressBar
from .training.loggers import CSVLogger, TensorBoard
from .training.monitored import EarlyStopping, SaveBest

__all__ = ["Callback", "History", "ProgressBar", "EpochLogger", "Checkpointer", "EarlyStopping",
           "SaveBest", "CSVLogger", "TensorBoard"]
