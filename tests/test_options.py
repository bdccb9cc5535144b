"""LaunchOptions: declared once (the CLI's flags and gluondist.launch() agree with it), checked
before anything starts, in one line."""
import pytest

from gluondist.launcher.errors import LaunchError
from gluondist.launcher.options import LaunchOptions
from conftest import SCRIPTS


JOB = str(SCRIPTS / "job.py")


@pytest.mark.parametrize("kwargs,message", [
    (dict(command=()), "nothing to run"),
    (dict(command=("nope.py",)), "not found"),
    (dict(num_workers=0), "at least 1"),
    (dict(num_servers=0), "needs a server"),
    (dict(kvstore="device"), "not a distributed kind"),
    (dict(start_timeout=0), "--start-timeout"),
    (dict(stall_timeout=float("inf")), "--stall-timeout must be a positive number of seconds"),
    (dict(threads=0), "--threads"),
    (dict(env={"A=B": "1"}), "KEY=VALUE"),
])
def test_options_are_checked_before_anything_starts(kwargs, message):
    args = dict(command=(JOB,))
    args.update(kwargs)
    with pytest.raises(LaunchError, match=message):
        LaunchOptions(**args).validate()


def test_launch_options_are_declared_once():
    # The CLI's flags come from LaunchOptions' declarations; gluondist.launch()'s keyword
    # defaults must agree with them (a new option shows up in both, or this fails).
    import inspect

    import gluondist
    from gluondist.cli import LAUNCH_FLAGS, launch as launch_command
    from gluondist.launcher.options import flags
    declared = flags()
    assert set(LAUNCH_FLAGS) == set(declared)
    by_name = {p.name: p for p in launch_command.params}
    for name, (flag, default) in declared.items():
        assert set(by_name[name].opts) == set(flag.names), name
        assert by_name[name].default == (() if flag.multiple else None if default == () else
                                         default), name
    for name, param in inspect.signature(gluondist.launch).parameters.items():
        if name in declared and param.default is not inspect.Parameter.empty:
            default = declared[name][1]
            assert param.default == default or (param.default is None and not default), name


def test_a_path_option_of_the_wrong_kind_is_one_line(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("")
    with pytest.raises(LaunchError, match=r"^log_dir must be a string \(a path, a name\), "
                                          r"not 123$"):
        LaunchOptions((str(script),), log_dir=123).validate()
