"""gluondist: distributed training for Apache MXNet Gluon, started with one command."""
from . import kvstore, parallel
from .callbacks import Callback, EarlyStopping, History
from .fit import fit

__version__ = "0.1.0"
__all__ = ["fit", "History", "Callback", "EarlyStopping", "kvstore", "parallel"]
