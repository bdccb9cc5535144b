"""``gluondist`` with the fake backend (tests/fake_backend.py) registered: ``fake_cli.py launch
--launcher fake ...``, for the fast tests of what the command itself does with a job (its
signals, the death of the launcher) that need no MXNet."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fake_backend import Fake  # noqa: E402

from gluondist.cli import main  # noqa: E402
from gluondist.launcher import transports  # noqa: E402

transports.register(Fake())
main()
