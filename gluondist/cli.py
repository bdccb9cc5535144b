"""The ``gluondist`` command. The only module that prints or handles signals."""
from __future__ import annotations

import os
import shlex
import signal
import sys
from typing import Optional

import click

from .kv.kinds import DIST_KINDS
from .launcher.child.proctree import signal_exit
from .launcher.errors import LaunchError, Stopped, StopRequest
from .launcher.options import LaunchOptions, env_pairs, flags
from .launcher.plan import LaunchPlan
from .launcher import resize
from .launcher.console import terminal
from .launcher.supervisor import dry_run as plan_only, launch_job
from .launcher.kubernetes import LAYOUTS, SCHEDULER_PORT


def _say(message: str) -> None:
    try:
        click.echo(f"gluondist: {message}", err=True)
    except OSError:  # the terminal is gone (SIGHUP): the exit code still tells
        pass


@click.group()
@click.version_option(package_name="gluondist")
def cli():
    """Distributed training for Apache MXNet Gluon."""


_TYPES = {"dir": click.Path(file_okay=False), "file": click.Path(dir_okay=False),
          "seconds": click.FloatRange(min=0, min_open=True),
          "workers": click.STRING}  # N or MIN:MAX, read by LaunchOptions


def launch_flags(*names: str, **changes):
    """The click options of these LaunchOptions fields, as options.py declares them (flag,
    default, type, envvar, help; --help shows the envvar); ``changes`` maps a field to
    settings of its own here (a bench's default, say)."""
    declared = flags()

    def decorate(command):
        for name in reversed(names):
            flag, default = declared[name]
            kind = flag.type if flag.type is not None else type(default)
            default = None if default == () else default  # no hosts: click's None
            settings = dict(type=_TYPES.get(kind, kind), default=default, help=flag.help,
                            envvar=flag.envvar, show_envvar=flag.envvar is not None,
                            metavar=flag.metavar, multiple=flag.multiple,
                            show_default=default not in (None, (), {}))
            if flag.multiple:
                settings.update(type=str, default=())
            settings.update(changes.get(name, {}))
            command = click.option(*flag.names, name, **settings)(command)
        return command
    return decorate


def options_of(command, values: dict) -> LaunchOptions:
    """LaunchOptions from a command's flags (``values``: field name -> what click gave)."""
    values = dict(values)
    if "env" in values:
        values["env"] = env_pairs(values["env"])
    for name in ("hosts", "server_hosts"):
        if name in values:
            values[name] = values[name] or ()
    return LaunchOptions(tuple(command), **values)


LAUNCH_FLAGS = tuple(flags())  # every option declared in options.py
BENCH_FLAGS = tuple(name for name, (flag, _) in flags().items() if flag.bench)
MAX_BENCH_KEYS = 10_000  # each key is set up and sent by Python calls: more never ends


@cli.command(context_settings={"allow_interspersed_args": False})
@launch_flags(*LAUNCH_FLAGS)
@click.option("--dry-run", is_flag=True, help="Print every process to start, start none.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def launch(dry_run, command, **values):
    """Run COMMAND (SCRIPT.py [ARGS] or -- ANY COMMAND) as a parameter-server job: a
    scheduler, servers and workers on this machine (or, with --launcher ssh|slurm, on other
    hosts), watched until the end.

    The first process to fail is reported with its traceback or last lines, every other one is
    stopped, and the exit code is the failing process's own (128+N for signal N); else 1 when
    the job did not form within --start-timeout, 2 for bad input, 75 for a lost ssh host, 77
    when a server refused a command, 124 for a stall (the docs' Troubleshooting page lists
    them all)."""
    options = options_of(command, values)
    cores = os.cpu_count() or 1
    if dry_run:
        plan = plan_only(options, os.environ, cores, terminal())
        _print_plan(plan, options)
        if options.elastic:
            click.echo(resize.rule(options, len(plan.of_role("worker"))))
        return
    result = _supervised(lambda stop: launch_job(options, terminal(), base_env=os.environ,
                                                 cores=cores, stop=stop))
    sys.exit(result.exit_code)


def _supervised(run):
    """``run(stop)`` with Ctrl-C, SIGTERM and SIGHUP turned into a request to stop the job,
    which the launcher's monitor loop acts on: an exception raised from a signal handler would
    land anywhere (between a spawn and its record, inside a lock that subprocess holds, in
    the teardown); exit 130 / 128+N. ``gluondist.launch()`` in a notebook keeps Ctrl-C as
    Python's KeyboardInterrupt, which the launcher's start and teardown let wait."""
    stop = StopRequest()

    def request(signum, frame):
        if stop and signum == signal.SIGINT:  # a second Ctrl-C: on to SIGKILL (see to_the_end)
            raise KeyboardInterrupt
        stop.request(signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, request)
    try:
        return run(stop)
    except KeyboardInterrupt:
        _say("interrupted (SIGINT): stopped every process of the job")
        sys.exit(signal_exit(signal.SIGINT))
    except Stopped as exc:
        what = f"left {', '.join(exc.left)} behind" if exc.left else \
            "stopped every process of the job"
        if exc.remote_silence:
            what += (f" (a host the launcher cannot reach ends its own {exc.remote_silence:g}s "
                     "after the launcher's last word)")
        how = "interrupted" if exc.signum == signal.SIGINT else "terminated"
        _say(f"{how} ({signal.Signals(exc.signum).name}): {what}")
        sys.exit(signal_exit(exc.signum))


@cli.group()
def bench():
    """Measure what a job's communication costs."""


def _server_counts(ctx, param, value):
    try:
        counts = [int(v) for v in value.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise click.BadParameter(f"{value!r}: give distinct server counts, such as 1,2,4")
    return counts


def _chunk_sizes(ctx, param, value: Optional[str]):
    from .kv.chunks import CHUNK_BYTES, MIN_CHUNK_BYTES
    if value is None:
        return None  # the job's own: see bench_kvstore
    texts = [v.strip() for v in value.split(",")]
    sizes = [int(t) if t.isascii() and t.isdigit() else -1 for t in texts]
    if any(s != 0 and s < MIN_CHUNK_BYTES for s in sizes) or len(set(sizes)) != len(sizes):
        raise click.BadParameter(f"{value!r}: give distinct byte counts, each 0 (whole) or at "
                                 f"least {MIN_CHUNK_BYTES}, such as {CHUNK_BYTES},65536")
    return sizes


def _compressions(ctx, param, value: str):
    from .kv.compression import REGISTRY
    names = [v.strip() for v in value.split(",")]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown or len(set(names)) != len(names):
        raise click.BadParameter(f"{value!r}: give distinct names of {', '.join(REGISTRY)}, "
                                 f"such as {','.join(REGISTRY)}")
    return names


def _compression_help() -> str:
    from .kv.compression import REGISTRY
    return ("fit's compression= values to measure, comma-separated (" +
            "; ".join(f"{n}: {c.description}" for n, c in REGISTRY.items()) +
            "): a row each, and advice.")


class _BenchWorkers(click.IntRange):
    """-n of the bench: a number (launch's MIN:MAX refused by name: the bench compares jobs of
    one size)."""

    def __init__(self):
        super().__init__(min=1)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and ":" in value:
            self.fail(f"{value!r}: the bench runs a fixed number of workers in every job, so -n "
                      "takes a number, such as 2", param, ctx)
        return super().convert(value, param, ctx)


def _check_bench_arrays(mbytes: float, keys: int, chunk_sizes, unchunked: bool,
                        trainers_each: int) -> None:
    """The bench's arrays, checked before any job: each of at least one float32 element and
    under MXNet's 2^31, and no more kvstore keys for their chunks (each of ``chunk_sizes``,
    and whole with ``unchunked``, ``trainers_each`` times) than MXNet can key."""
    from .bench.kvstore import key_sizes, keys_needed
    from .kv.chunks import MAX_KEY
    elements = int(mbytes * 2 ** 20 / 4)  # float32
    if keys > elements:
        raise click.BadParameter(f"{keys} arrays of {mbytes:g} MB would hold under one float32 "
                                 f"element each; give at most {max(1, elements)} keys or more "
                                 "megabytes", param_hint="--keys")
    if -(-elements // keys) >= 2 ** 31:
        raise click.BadParameter(f"{mbytes:g} MB in {keys} array(s) is over MXNet's 2^31 "
                                 "elements an array; give fewer megabytes or more --keys",
                                 param_hint="--mbytes")
    needed = keys_needed(key_sizes(mbytes, keys), chunk_sizes + ([0] if unchunked else []),
                         trainers_each)
    if needed > MAX_KEY:
        raise click.BadParameter(f"{mbytes:g} MB in chunks of {min(chunk_sizes)} bytes need "
                                 f"{needed} kvstore keys, more than MXNet's kvstore can key "
                                 f"({MAX_KEY}); give bigger chunks or fewer megabytes",
                                 param_hint="--chunk-bytes")


@bench.command("kvstore")
@launch_flags("num_workers", num_workers={"default": 2, "type": _BenchWorkers(), "metavar": "N",
                                          "help": "Worker processes of every job."})
@click.option("--servers", callback=_server_counts, default="1,2,4", show_default=True,
              help="Server counts to measure, comma-separated.")
@click.option("--mbytes", type=click.FloatRange(min=0, min_open=True), default=64.0,
              show_default=True, help="Megabytes each worker pushes and pulls per step.")
@click.option("--keys", type=click.IntRange(min=1, max=MAX_BENCH_KEYS), default=8,
              show_default=True, help="Arrays the megabytes are split into (a model's "
                                      f"layers), at most {MAX_BENCH_KEYS:,}.")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="End with one JSON object.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Also draw the table (step time against servers, per "
                                   "layout, with the model's line) to FILE, e.g. bench.png.")
@launch_flags(*BENCH_FLAGS,
              server_hosts={"help": "Also measure every server count with the servers on these "
                                    "hosts."})
@click.option("--chunk-bytes", "chunk_sizes", callback=_chunk_sizes, default=None,
              metavar="BYTES[,BYTES...]",
              help="Bytes per kvstore chunk of a big array, as fit sends them (0: whole); "
                   "several, comma-separated, to measure each: a row each, and advice (the "
                   "first unless another makes over 1.10x its steps per second) [default: "
                   "GLUONDIST_CHUNK_BYTES from --env or the environment, else "
                   "gluondist.kvstore.CHUNK_BYTES; fit given neither chooses among "
                   "524288,262144,131072,65536 by measuring: give those to see why].")
@click.option("--unchunked", is_flag=True,
              help="Also measure each row with every array sent whole.")
@click.option("--compression", "compressions", callback=_compressions, default="none",
              show_default=True, help=_compression_help())
def bench_kvstore(num_workers, servers, mbytes, keys, steps, as_json, plot_path, chunk_sizes,
                  unchunked, compressions, **values):
    """Run a dist_sync job per server count (and layout, with --server-hosts) whose workers
    push and pull MBYTES per step the way fit does, and print the step time, the cost model's
    prediction and its error, the efficiency against the raw TCP bound and the bytes each
    worker and the busiest server move; then recommend the fewest servers within 10% of the
    best, and where to put them, and (with several --chunk-bytes) a chunk size."""
    import json
    import math
    from .bench.kvstore import format_table, run
    if not math.isfinite(mbytes):
        raise click.BadParameter(f"{mbytes} is not a number of megabytes", param_hint="--mbytes")
    if plot_path is not None:
        _check_plot_path(plot_path)
    options = options_of(("bench",), {**values, "num_workers": num_workers,
                                        "num_servers": servers[0]})
    if chunk_sizes is None:  # the size given to fit's jobs, else the default
        from .kv.chunks import chunk_bytes_from_env
        try:
            chunk_sizes = [chunk_bytes_from_env({**os.environ, **options.env})]
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--env") from exc
    _check_bench_arrays(mbytes, keys, chunk_sizes, unchunked, len(compressions))
    show = terminal()
    table, recommended, failed = _supervised(lambda stop: run(
        options, servers, mbytes, keys, steps,
        lambda opts, shw: launch_job(opts, shw, keep_logs=True, base_env=os.environ, stop=stop),
        show,
        chunk_sizes, unchunked, compressions=compressions))
    if failed is not None:
        sys.exit(failed.exit_code)
    for line in format_table(table, recommended):
        click.echo(line)
    if plot_path is not None:
        from .bench.plot import plot_rows
        try:
            plot_rows([r.as_dict() for r in table  # the recommended compression and chunks
                       if (r.compression, r.chunk_bytes) ==
                       (recommended.compression, recommended.chunk_bytes)], plot_path)
        except OSError as exc:
            raise click.ClickException(f"--plot {plot_path}: cannot write it: {exc}") from exc
    if as_json:
        from .bench.kvstore import chunk_advice, compression_advice
        click.echo(json.dumps({"rows": [r.as_dict() for r in table],
                               "recommended_servers": recommended.servers,
                               "recommended_layout": recommended.layout,
                               "recommended_chunk_bytes": recommended.chunk_bytes,
                               "compression_advice": compression_advice(table, recommended),
                               "chunk_advice": chunk_advice(table, recommended)}))


def _check_plot_path(path: str) -> None:
    """--plot's problems before the jobs run, not after."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from . import extra_hint
        raise click.ClickException(f"--plot needs matplotlib: {extra_hint('plot')}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise click.BadParameter(f"{path}: {parent} is not a directory this user can write to",
                                 param_hint="--plot")


def _print_plan(plan: LaunchPlan, options: LaunchOptions) -> None:
    from .launcher.process import added_at_start
    from .launcher.transports import backend
    for spec in plan.specs:
        click.echo(f"{spec.label} on {spec.host}: {shlex.join(spec.argv)}")
        for key, value in spec.env.items():
            click.echo(f"    {key}={_quoted(value)}")
        for key, what in added_at_start(spec, backend(options.launcher),
                                        options.stall_timeout is not None).items():
            click.echo(f"    {key}={what}")


def _quoted(value: str) -> str:
    """A value as a shell reads it back, on one line ($'...' for a newline or a tab)."""
    if value.isprintable():
        return shlex.quote(value)
    return "$'" + value.encode("unicode_escape").decode("ascii").replace("'", "\\'") + "'"


@cli.group()
def manifest():
    """Write the objects that run a job on a cluster engine."""


class _FixedWorkers(click.ParamType):
    """-n of a Kubernetes manifest: a number; MIN:MAX is refused by name (an Indexed Job's
    completions are fixed)."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and ":" in value:
            self.fail("an Indexed Job's completions are fixed, so -n takes a number here; "
                      "elastic jobs (-n MIN:MAX) need gluondist launch --launcher ssh", param,
                      ctx)
        return click.IntRange(min=1).convert(value, param, ctx)


@manifest.command("kubernetes", context_settings={"allow_interspersed_args": False})
@launch_flags("num_workers", "num_servers", num_workers={"type": _FixedWorkers(),
                                                         "metavar": "N",
                                                         "help": "Worker processes."},
              num_servers={"type": click.IntRange(min=1)})
@click.option("--image", required=True, help="Container image with gluondist and MXNet.")
@click.option("--name", default="gluondist", show_default=True,
              help="Prefix of the objects' names (a DNS label).")
@click.option("--port", type=click.IntRange(1, 65535), default=SCHEDULER_PORT, show_default=True,
              help="The scheduler's port.")
@launch_flags("kvstore", "gpus_per_worker", "env", kvstore={"type": click.Choice(DIST_KINDS)},
              gpus_per_worker={"type": click.IntRange(min=0),
                               "help": "An nvidia.com/gpu limit of this many GPUs on each "
                                       "worker's pod; with --layout one-job (one pod template) "
                                       "the scheduler's and servers' pods get it too, with "
                                       "per-role only the workers'."})
@click.option("--layout", type=click.Choice(LAYOUTS), default=LAYOUTS[0],
              show_default=True,
              help="one-job: any failure ends every pod, one pod template for all roles; "
                   "per-role: a Job per role with its own resources (GPUs for workers only), "
                   "but a worker's failure does not end the scheduler and servers.")
@click.option("--active-deadline", type=click.IntRange(min=1), default=None, metavar="SECONDS",
              help="activeDeadlineSeconds of every Job: Kubernetes ends it after that long.")
@click.option("-o", "--output", type=click.File("w"), default="-", show_default=True)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def manifest_kubernetes(num_workers, num_servers, image, name, port, kvstore, gpus_per_worker,
                        env, layout, active_deadline, output, command):
    """Kubernetes objects (JSON, for `kubectl apply -f`) running COMMAND as the workers of a
    parameter-server job, and a headless Service. By default one Indexed Job (index 0 the
    scheduler, then the servers, then the workers) that fails, ending every pod, when any
    process fails."""
    import json
    from .launcher.kubernetes import kubernetes
    objects = kubernetes(name, image, command, num_workers, num_servers, port=port,
                         kvstore=kvstore, gpus_per_worker=gpus_per_worker, env=env_pairs(env),
                         layout=layout, active_deadline=active_deadline)
    output.write(json.dumps(objects, indent=2) + "\n")


@cli.command("env")
def env_command():
    """Show Python, MXNet and numpy versions, MXNet's build features, GPUs and cores."""
    from .machine import describe
    problem = describe(click.echo)
    if problem:
        raise click.ClickException(problem)


def main(argv=None) -> None:
    """Entry point: every error a single line, usage errors exit 2."""
    try:
        cli.main(args=argv, prog_name="gluondist", standalone_mode=False)
    except LaunchError as exc:
        _say(f"error: {exc}")
        sys.exit(2)
    except click.exceptions.Abort:
        _say("aborted")
        sys.exit(signal_exit(signal.SIGINT))
    except click.ClickException as exc:
        _say(f"error: {exc.format_message()}")
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
