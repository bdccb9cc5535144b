"""gluondist bench kvstore without jobs: the key count, the model, the table, the
recommendation, the plot and the help (the command's refusals: launcher/test_bench_cli.py;
real jobs: e2e/test_bench_jobs.py)."""
import pytest

from gluondist import wire
from gluondist.bench import kvstore as bench
from gluondist.bench.model import Layout


def test_the_bench_counts_keys_as_the_trainer_sends_them():
    big = bench.key_sizes(64, 8)  # 2 M elements each: sliced over every server
    assert sum(big) == 16 * 2 ** 20 and bench.busiest_share(big, 4) == pytest.approx(0.25)
    small = bench.key_sizes(2, 1)  # 0.5 M elements: one key, whole on one server
    assert bench.busiest_share(small, 4) == 1.0
    # as the trainer sends them: 1 MiB chunks, each whole on one server
    assert bench.sent_sizes(bench.key_sizes(8, 1), 2 ** 20) == [2 ** 18] * 8
    assert bench.busiest_share(bench.sent_sizes(big, 2 ** 20), 4) == pytest.approx(0.25)


def test_the_model_takes_the_big_array_bound_the_job_gets():
    sizes = bench.key_sizes(2, 3)  # 174,763 elements each
    assert bench.busiest_share(sizes, 2) == pytest.approx(2 / 3)  # whole keys: 0, 2 on one
    assert bench.busiest_share(sizes, 2, bound=100_000) == pytest.approx(0.5)  # sliced


def test_the_layout_is_read_from_the_plan_the_job_ran():
    # "node1:4" is one host of four slots (the raw text is 7 characters); with two hosts the
    # servers go round-robin over both, so the jobs span hosts even when the workers fit one.
    from gluondist.launcher.options import LaunchOptions
    from gluondist.launcher.plan import build_plan
    from gluondist.launcher.supervisor import resolve
    for hosts, kind in (("node1:4", "one host"), ("node1:1,node2:1", "colocated"),
                        ("node1:2,node2:2", "mixed")):
        options = resolve(LaunchOptions((bench.WORKER,), 2, 2, launcher="ssh", hosts=hosts), {})
        layout = bench.layout_of(build_plan(options, 9000, range(9001, 9005)))
        found = bench.rows([bench.Measured(layout, 0.1, None, None)], [10], 2 ** 20)[0].layout
        assert found == kind, hosts


def measured(workers, servers, step_s, tcp=None):
    return bench.Measured(Layout(tuple(workers), tuple(servers)), step_s, None, tcp)


def test_rows_calibrate_once_and_recommend_a_count_and_a_layout():
    sizes = bench.key_sizes(8, 8)  # 8 keys of 1 MiB
    table = bench.rows([measured("ab", "a", 0.45, tcp=24e6), measured("ab", "ab", 0.46),
                        measured("ab", "s", 0.80), measured("ab", "st", 0.44)],
                       sizes, 2 ** 20)
    assert [(r.servers, r.layout) for r in table] == [
        (1, "colocated"), (2, "colocated"), (1, "dedicated"), (2, "dedicated")]
    assert table[0].predicted_s == pytest.approx(0.45) and table[0].error == pytest.approx(0)
    # the busiest link carries 8 MiB + one chunk (colocated), 16 + 2 chunks (one dedicated
    # server), 8 + 2 chunks (two): predictions scale from the first row alone
    assert table[1].predicted_s == pytest.approx(0.45)
    assert table[2].predicted_s == pytest.approx(0.45 * 18 / 9)
    assert table[3].predicted_s == pytest.approx(0.45 * 10 / 9)
    assert table[0].link_bound_s == pytest.approx(8 * 2 ** 20 / 24e6)  # no fill in the bound
    assert table[0].efficiency == pytest.approx(table[0].link_bound_s / 0.45)
    assert table[1].worker_mb == 16 and table[1].server_mb == 16
    best = bench.recommend(table)
    assert (best.servers, best.layout) == (1, "colocated")  # 0.45 is within 10% of 0.44
    assert bench.advice(best).startswith("recommended: -s 1 on the workers' hosts")
    faster = bench.rows([measured("ab", "a", 0.9), measured("ab", "st", 0.45)], sizes, 2 ** 20)
    assert bench.advice(bench.recommend(faster)).startswith(
        "recommended: -s 2 on hosts of their own (--server-hosts)")


@pytest.fixture
def planned():
    """A backend with ssh's capabilities but no preflight, for jobs that are only planned."""
    from gluondist.launcher import transports

    class Planned(transports.Backend):
        name, multi_host, takes_hosts, server_hosts = "planned", True, True, True
    transports.register(Planned())
    yield Planned.name
    transports.unregister(Planned.name)


def test_with_server_hosts_every_count_runs_colocated_then_on_the_server_hosts(planned):
    # run()'s jobs, each answered from its own plan (no process starts): the table's order,
    # and the model scaled by what each placement puts on its busiest link (2 MiB in two
    # chunks; MiB plus the pipeline's fill: 2 + 1 colocated, 4 + 2 on one dedicated server,
    # 2 + 2 on each of two). tests/e2e/test_server_hosts.py runs such jobs on real links.
    from types import SimpleNamespace

    from gluondist.launcher.options import LaunchOptions
    from gluondist.launcher.plan import build_plan
    from gluondist.launcher.supervisor import resolve
    ran = []

    def launch_job(options, show):
        ran.append((options.num_servers, options.server_hosts))
        plan = build_plan(resolve(options, {}), 9000, range(9001, 9010))
        figures = {"step_s": [0.25], "tcp_bytes_per_s": 2 ** 23}  # 8 MiB/s
        return SimpleNamespace(exit_code=0, plan=plan,
                               logs={"worker 0": [wire.encode(wire.Bench(figures))]})
    base = LaunchOptions(("bench",), 2, 1, launcher=planned, hosts="a:1,b:1",
                         server_hosts="s,t")
    table, _, failed = bench.run(base, [1, 2], 2, 1, 1, launch_job, lambda *_: None, [2 ** 20],
                                 base_env={})
    assert failed is None
    assert ran == [(1, ()), (2, ()), (1, base.server_hosts), (2, base.server_hosts)]
    assert [(r.servers, r.layout) for r in table] == [
        (1, "colocated"), (2, "colocated"), (1, "dedicated"), (2, "dedicated")]
    assert [r.predicted_s / 0.25 for r in table] == pytest.approx([1, 1, 2, 4 / 3])
    assert [r.link_bound_s for r in table] == pytest.approx([0.25, 0.25, 0.5, 0.25])


def test_rows_on_one_host_are_predicted_to_take_the_first_rows_time():
    table = bench.rows([measured("hh", "h", 0.16), measured("hh", "hh", 0.15)],
                       bench.key_sizes(64, 8), 2 ** 20)
    assert [r.layout for r in table] == ["one host"] * 2
    assert [r.predicted_s for r in table] == [0.16, 0.16]
    assert table[0].efficiency is None and bench.recommend(table).servers == 1


def test_worker_zeros_result_line_is_found():
    line = wire.encode(wire.Bench({"step_s": 0.1, "bytes": 8}))
    assert bench.parse(["noise", line])["step_s"] == 0.1
    assert bench.parse(["noise"]) is None


def test_the_plot_draws_each_layout_measured_and_modelled():
    pytest.importorskip("matplotlib")
    from gluondist.bench.plot import plot_rows
    rows = [{"servers": s, "layout": kind, "step_s": step, "predicted_step_s": model,
             "unchunked_step_s": whole}
            for s, kind, step, model, whole in [(1, "colocated", 0.41, 0.41, 0.69),
                                                (2, "colocated", 0.42, 0.41, 0.36),
                                                (2, "dedicated", 0.51, 0.46, None),
                                                (1, "dedicated", 0.86, 0.82, None)]]
    fig = plot_rows(rows)
    colocated, dedicated = fig.axes
    assert (colocated.get_title(), dedicated.get_title()) == ("colocated", "dedicated")
    lines = {line.get_label(): list(line.get_ydata()) for line in dedicated.get_lines()}
    assert lines == {"measured": [0.86, 0.51], "cost model": [0.82, 0.46]}  # sorted by servers
    assert [list(l.get_ydata()) for l in colocated.get_lines()][2] == [0.69, 0.36]
    with pytest.raises(ValueError, match="no rows"):
        plot_rows([])


def test_the_bench_help_offers_a_worker_count_only():
    # issue 36, defect 5: it offered -n N|MIN:MAX, as gluondist launch does, and refused 2:3
    from click.testing import CliRunner

    from gluondist.cli import cli
    out = CliRunner().invoke(cli, ["bench", "kvstore", "--help"], terminal_width=200)
    assert out.exit_code == 0
    line = next(l for l in out.output.splitlines() if "--num-workers" in l)
    assert "-n, --num-workers N " in line and "MIN:MAX" not in out.output, line
    assert "elastic" not in out.output


def test_compressed_rows_count_their_bytes_and_are_advised_only_where_faster():
    # 8 keys of 1 MiB, two workers, the server on worker 0's host: the busiest link direction
    # carries worker 1's pushes into it and its pulls out of it, plus one chunk's fill
    sizes = bench.key_sizes(8, 8)

    def table(none_s, fp16_s, twobit_s):
        return bench.rows([bench.Measured(Layout(("a", "b"), ("a",)), s, None, 24e6, c)
                           for c, s in (("none", none_s), ("fp16", fp16_s), ("2bit", twobit_s))],
                          sizes, 2 ** 20)
    rows = table(0.45, 0.30, 0.40)
    assert [r.compression for r in rows] == ["none", "fp16", "2bit"]
    # fp16 halves both directions; 2-bit's pushes are 1/16, its pulls whole: the busiest
    # direction (pulls out of host a) is as long as uncompressed
    assert [r.predicted_s for r in rows] == pytest.approx([0.45, 0.225, 0.45])
    assert [r.worker_mb for r in rows] == pytest.approx([16, 8, 8.5])
    best = bench.recommend(rows)
    assert (best.compression, best.servers) == ("none", 1)  # servers chosen uncompressed
    assert bench.compression_advice(rows, best) == \
        "compression: 'fp16' (steps per second against none: fp16 1.50x, 2bit 1.12x)"
    assert bench.compression_advice(table(0.45, 0.42, 0.60), best).startswith(
        "compression: none (steps per second against none: fp16 1.07x, 2bit 0.75x;")
    assert bench.compression_advice(table(0.45, 0.3, 0.4)[:1], best) == ""  # none measured alone


def test_each_chunk_size_is_a_row_calibrated_alone_and_advised_only_where_faster():
    # two jobs (1 server on worker 0's host, then one on each worker's host), each measuring
    # 512 KiB chunks (2 per 1 MiB key) and 64 KiB ones (16 per key)
    sizes = bench.key_sizes(8, 8)

    def table(first_s, second_s):
        return bench.rows([bench.Measured(Layout(("a", "b"), servers), s * scale, None, 24e6,
                                          "none", c)
                           for servers, scale in ((("a",), 1), (("a", "b"), 0.95))
                           for c, s in ((1 << 19, first_s), (1 << 16, second_s))],
                          sizes, 1 << 20)
    rows = table(0.45, 0.30)
    assert [(r.servers, r.chunk_bytes) for r in rows] == [
        (1, 1 << 19), (1, 1 << 16), (2, 1 << 19), (2, 1 << 16)]
    assert [r.as_dict()["chunk_bytes"] for r in rows] == [1 << 19, 1 << 16] * 2
    # each chunk size's model is calibrated by its own first row (a chunk size is a schedule
    # of its own): with two workers the busiest link carries 8 MiB plus one chunk's fill with
    # one server and with two, so each size predicts its first row's time for both (one
    # calibration for both sizes would predict 0.45 * (8 + 1/16) / (8 + 1/2) for 64 KiB)
    assert [r.predicted_s for r in rows] == pytest.approx([0.45, 0.30, 0.45, 0.30])
    assert [r.error for r in rows[2:]] == pytest.approx([1 / 0.95 - 1] * 2)
    best = bench.recommend(rows)
    assert best is rows[1]  # 1 server within 10% of the best (2 servers), with 64 KiB
    assert bench.chunk_advice(rows, best) == (
        "chunks: 65536 bytes: give the job --env GLUONDIST_CHUNK_BYTES=65536 (steps per "
        "second against 524288 bytes: 65536 bytes 1.50x)")
    close = table(0.45, 0.42)  # 1.07x the steps per second: the first measured is kept, and
    assert bench.recommend(close) is close[0]  # the servers are chosen on the sizes kept
    assert bench.chunk_advice(close, close[0]).startswith(
        "chunks: 524288 bytes, the first measured (steps per second against it: 65536 bytes "
        "1.07x; no other makes more than 1.10x)")
    # the rule is in steps per second: 1.0975x is not more than 1.10x, 1.12x is
    assert bench.recommend(table(0.439, 0.40)).chunk_bytes == 1 << 19
    assert bench.recommend(table(0.448, 0.40)).chunk_bytes == 1 << 16
    whole = bench.rows([bench.Measured(Layout(("a", "b"), ("a",)), s, None, 24e6, "none", c)
                        for c, s in ((1 << 19, 0.45), (0, 0.30))], sizes, 1 << 20)
    assert bench.chunk_advice(whole, bench.recommend(whole)) == (
        "chunks: arrays whole: give the job --env GLUONDIST_CHUNK_BYTES=0 (steps per second "
        "against 524288 bytes: arrays whole 1.50x)")
    assert bench.chunk_advice(close[:1], close[0]) == ""  # one chunk size: no advice
    assert any(line.startswith("chunks: 65536") for line in bench.format_table(rows, best))
