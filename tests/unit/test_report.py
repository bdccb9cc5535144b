"""What the launcher's report leaves out of a stalled worker's stack: the frames every worker
has below its script (runpy's, the bootstrap's), never a frame of the user's."""
import pytest

from gluondist.launcher.child import BOOTSTRAP, source_path
from gluondist.launcher.report import _launch_frame


@pytest.mark.parametrize("line,ours", [
    ('  File "<frozen runpy>", line 88 in _run_code', True),  # Python 3.11
    ('  File "/usr/lib/python3.10/runpy.py", line 86, in _run_code', True),
    (f'  File "/venv/lib/python3.11/site-packages/{source_path(BOOTSTRAP)}", line 9 in main',
     True),
    ('  File "/home/u/runpy.py", line 3 in main', False),  # a user's own module of that name
    ('  File "/home/u/train.py", line 12 in stuck', False),
])
def test_only_our_frames_are_left_out(line, ours):
    assert _launch_frame(line) is ours
