"""What a person sees of a job (gluondist.launcher.console): each process's lines with its
prefix, ps-lite's chatter hidden but kept in the log, and what a teardown left and an
interrupt stopped."""
import signal

from gluondist.launcher.console import Console
from gluondist.launcher.outcome import Ending, Unreaped, Why
from gluondist.launcher.plan import ProcessSpec


SERVER = ProcessSpec("server", 0, "127.0.0.1", ("node",), {})
WORKER = ProcessSpec("worker", 0, "127.0.0.1", ("train",), {})
CHATTER = "[12:00:00] /src/ps-lite/src/van.cc:100: Bind to role=worker, id=9"


def test_the_console_prefixes_lines_hides_chatter_and_keeps_every_line():
    shown = []
    console = Console(lambda text, note: shown.append((text, note)), keep_logs=True)
    console.line(WORKER, "hello")
    console.line(WORKER, CHATTER)
    console.note("a note")
    assert shown == [("[worker 0] hello", False), ("gluondist: a note", True)]
    assert console.logs == {"worker 0": ["hello", CHATTER]}
    shown.clear()
    loud = Console(lambda text, note: shown.append((text, note)), hide_chatter=False)
    loud.line(WORKER, CHATTER)
    assert (shown, loud.logs) == ([(f"[worker 0] {CHATTER}", False)], {})


def test_the_console_says_what_a_teardown_left_and_what_an_interrupt_stopped():
    shown = []
    console = Console(lambda text, note: shown.append(text))
    console.teardown([Unreaped("worker 0", 42, "D (disk sleep)")], [SERVER, WORKER], None)
    assert shown[0].startswith("gluondist: worker 0 (pid 42) did not die after SIGKILL, in "
                               "state D (disk sleep)")
    assert shown[1:] == ["gluondist: stopped server 0, worker 0"]
    shown.clear()
    console.teardown([], [SERVER], Ending(Why.DONE))  # a job's own end: nothing to say
    console.teardown([], [SERVER], Ending(Why.STOPPED, signum=signal.SIGTERM))
    assert shown == ["gluondist: stopped server 0"]

