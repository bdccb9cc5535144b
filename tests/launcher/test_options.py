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
    # gluondist.launch() writes out no default of its own (issue 36, defect 7): it takes the
    # fields as **options, and without an argument or a variable it gets the declared default
    from gluondist.launcher.options import from_environment
    assert [n for n in inspect.signature(gluondist.launch).parameters if n in declared] == []
    built = from_environment((JOB,), {}, {})
    assert {n: getattr(built, n) for n in declared} == {n: d for n, (_, d) in declared.items()}


def test_a_path_option_of_the_wrong_kind_is_one_line(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("")
    with pytest.raises(LaunchError, match=r"^log_dir must be a string \(a path, a name\), "
                                          r"not 123$"):
        LaunchOptions((str(script),), log_dir=123).validate()


def test_the_python_api_reads_the_same_environment_variables_as_the_cli(tmp_path,
                                                                       monkeypatch, fake):
    # issue 36, defect 7: one declaration (Flag.envvar) feeds both doors; an argument wins
    import gluondist
    from fake_backend import WORKER
    monkeypatch.setenv("GLUONDIST_LAUNCHER", "fake")
    monkeypatch.setenv("GLUONDIST_NUM_WORKERS", "3")
    monkeypatch.setenv("GLUONDIST_HOSTS", "h1:1,h2:1,h3:1")
    monkeypatch.setenv("GLUONDIST_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("GLUONDIST_ENV", f"FAKE_DIR={tmp_path} A=1")
    result = gluondist.launch(WORKER, "ok", echo=False)
    assert (result.exit_code, result.last.workers) == (0, 3)
    assert (tmp_path / "logs" / "worker.2.log").exists()
    assert result.plan.specs[-1].env["A"] == "1"
    result = gluondist.launch(WORKER, "ok", num_workers=2, env={"FAKE_DIR": str(tmp_path)},
                              echo=False)
    assert result.last.workers == 2 and "A" not in result.plan.specs[-1].env


def test_an_option_variable_the_api_cannot_read_is_one_line(monkeypatch):
    import gluondist
    monkeypatch.setenv("GLUONDIST_MAX_RESTARTS", "two")
    with pytest.raises(LaunchError) as raised:
        gluondist.launch(JOB, echo=False)
    assert str(raised.value) == ("GLUONDIST_MAX_RESTARTS='two' (--max-restarts) must be a "
                                 "whole number; unset it or fix it")


def test_every_option_variable_reads_the_same_through_both_doors(monkeypatch, tmp_path):
    # a valid value in each flag's variable: click's parse (the CLI) and from_environment
    # (gluondist.launch()) build equal LaunchOptions
    from gluondist.cli import cli, options_of
    from gluondist.launcher.options import flags, from_environment
    texts = {"num_workers": "2:3", "num_servers": "2", "kvstore": "dist_async",
             "start_timeout": "12.5", "log_dir": str(tmp_path / "logs"), "env": "A=1 B=x=y",
             "threads": "3", "max_restarts": "2", "launcher": "ssh", "hosts": "h1:2,h2:2",
             "server_hosts": "s1:1", "interface": "eth0", "gpus_per_worker": "1",
             "ssh_config": str(tmp_path / "ssh_config"), "scheduler_address": "10.0.0.1",
             "stall_timeout": "30", "host_discovery": str(tmp_path / "hosts.sh"),
             "link_timeout": "9"}
    declared = flags()
    assert sorted(texts) == sorted(declared)  # a new option gets a value here
    environ = {declared[name][0].envvar: text for name, text in texts.items()}
    for key, text in environ.items():
        monkeypatch.setenv(key, text)
    ctx = cli.commands["launch"].make_context("launch", [JOB])
    by_cli = options_of(ctx.params["command"],
                        {k: v for k, v in ctx.params.items() if k in declared})
    by_api = from_environment((JOB,), {}, environ)
    assert by_api == by_cli
    assert (by_api.num_workers, by_api.min_workers, by_api.env) == (3, 2, {"A": "1", "B": "x=y"})


def test_an_argument_of_none_is_not_given_and_the_variable_is_read(monkeypatch):
    # a wrapper passing its own None defaults lost GLUONDIST_MAX_RESTARTS (a new user's find)
    import gluondist
    monkeypatch.setenv("GLUONDIST_MAX_RESTARTS", "two")
    with pytest.raises(LaunchError, match=r"^GLUONDIST_MAX_RESTARTS='two' \(--max-restarts\)"):
        gluondist.launch(JOB, echo=False, max_restarts=None, log_dir=None)
