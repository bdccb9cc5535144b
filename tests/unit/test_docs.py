"""The docs hold together: the README's commands and CI's, links, the API reference, every
option, variable, exit code and message the code has, named where the pages say (the
site's build: e2e/test_docs_site.py)."""
import ast
import re

import pytest
from conftest import ROOT, load_file


def readme_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("```sh") + 1
    return lines[start], lines[start + 1]


def test_ci_runs_the_readme_test_command():
    _, test_command = readme_commands()
    assert "pytest" in test_command
    ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if not l.startswith("#")]
    assert test_command in ci


def test_readme_main_job_is_a_distributed_run_of_a_bundled_example():
    main_job, _ = readme_commands()
    script = main_job.split("gluondist launch -n 2 -s 1 ")[1]
    assert (ROOT / script).is_file()


def test_the_docs_start_with_the_readmes_two_commands():
    start = (ROOT / "docs" / "index.md").read_text().split("```sh\n", 1)[1].splitlines()
    assert tuple(start[:2]) == readme_commands()


def test_the_readme_is_a_front_page_whose_links_resolve():
    from markdown.extensions.toc import slugify
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", text)
    assert len(links) >= 10
    for path, anchor in links:
        page = (ROOT / path).read_text()  # a missing page fails here
        headings = {slugify(h, "-") for h in re.findall(r"^#+ (.+)$", page, re.M)}
        assert not anchor or anchor in headings, f"README: {path}#{anchor}: no such heading"


def test_the_api_reference_has_every_public_name(checker):
    import gluondist
    shown = re.findall(r"^::: (\S+)$", (ROOT / "docs" / "reference" / "api.md").read_text(),
                       re.M)
    lazy = vars(gluondist)["_LAZY"]
    wanted = [".".join(filter(None, lazy[name])) for name in gluondist.__all__]
    assert sorted(shown) == sorted(wanted)
    # a module shown with its members named (kvstore's come from the modules behind it)
    check = checker
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    for module, members in re.findall(r"^::: gluondist\.(\S+)\n\s+options:\n\s+members: \[(.*?)\]",
                                      text, re.M | re.S):
        missing = [m for m in re.split(r"[\s,]+", members.strip())
                   if not check.name_exists(f"{module}.{m}")]
        assert missing == [], f"docs/reference/api.md: gluondist.{module} has no {missing}"


def hooks():
    return load_file("docs_hooks", ROOT / "docs" / "hooks.py")


@pytest.fixture(scope="session")
def checker():
    """docs/hooks.py's Checker, built once: griffe reads the package's source (and asks git
    about it, a process, before the unit tier's guard applies to any test)."""
    return hooks().Checker()


def test_a_page_naming_what_does_not_exist_is_told(checker):
    check = checker
    good = ("`gluondist launch -n 2 --stall-timeout 60 train.py --epochs 3`, `--max-restarts`, "
            "`gluondist.fit`, `gluondist.kvstore.CHUNK_BYTES`, `tests/netns.py`, `--ctx 2`,\n"
            "```sh\ngluondist bench kvstore --plot b.png  # gluondist never\n```\n"
            "`python benchmarks/fit_overhead.py --repeats 9 --json r.json`")
    assert check.problems(good) == []
    bad = ("`gluondist launch --stall-timout 60 train.py`, `--no-such`, `gluondist.fitt`, "
           "`gluondist.kvstore.CHUNK`, `tests/nope.py`, `gluondist lunch -n 2`, "
           "`python benchmarks/fit_overhead.py --repeat 9`")
    assert sorted(check.problems(bad)) == sorted([
        "tests/nope.py: no such file in the repository",
        "gluondist.fitt: no such name in the package",
        "gluondist.kvstore.CHUNK: no such name in the package",
        "--stall-timout is no option of `gluondist launch`",
        "--no-such is no option of any gluondist command",
        "`gluondist lunch` is no command",
        "--repeat is no option of benchmarks/fit_overhead.py"])


def test_lists_that_would_not_render_are_told():
    text = "A paragraph:\n- an item\n  - nested by 2\n\n- fine\n    - nested by 4\n"
    assert hooks().layout_problems(text) == ["line 2: a list needs a blank line before it",
                                           "line 3: a nested list needs 4 spaces of indent"]


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md"])
def test_the_pages_outside_docs_name_only_what_exists(page, checker):  # not in the build's check
    assert checker.problems((ROOT / page).read_text()) == []
    assert hooks().layout_problems((ROOT / page).read_text()) == []


def test_the_test_extra_installs_the_docs_extra():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(extras["docs"]) <= set(extras["test"])


def test_every_launch_option_has_an_environment_variable_and_help_shows_it():
    import click
    from click.testing import CliRunner
    import gluondist.envvars as ev
    from gluondist.cli import cli
    from gluondist.launcher.options import flags
    declared = flags()
    assert len(declared) >= 16  # every LaunchOptions field with a flag
    without = [name for name, (flag, _) in declared.items() if flag.envvar is None]
    assert without == [], f"these options declare no envvar: {without}"
    named = [flag.envvar for flag, _ in declared.values()]
    assert len(set(named)) == len(named)
    assert [n for n in named if getattr(ev, n, None) != n] == []  # a constant of envvars.py
    # each option's entry as --help prints it (the text click lays out, line breaks aside)
    launch = cli.commands["launch"]
    ctx = click.Context(launch, info_name="launch")
    entries = {p.name: " ".join(p.get_help_record(ctx)[1].split()) for p in launch.params
               if isinstance(p, click.Option) and p.name in declared}
    assert sorted(entries) == sorted(declared)
    assert [n for n, (flag, _) in declared.items()
            if f"[env var: {flag.envvar}" not in entries[n]] == []
    shown = "".join(CliRunner().invoke(cli, ["launch", "--help"]).output.split())
    assert [n for n, entry in entries.items() if "".join(entry.split()) not in shown] == []


def used_envvars():
    """The names of gluondist/envvars.py that the code uses (ev.NAME, envvars.NAME, or
    imported by name)."""
    import gluondist.envvars as ev
    names = [n for n in vars(ev) if n.isupper()]
    source = "\n".join(p.read_text() for p in (ROOT / "gluondist").rglob("*.py")
                       if p.name != "envvars.py")
    return {getattr(ev, n) for n in names if re.search(rf"\b{n}\b", source)}


def test_the_environment_page_names_every_variable_the_code_reads_or_sets(tmp_path):
    page = (ROOT / "docs" / "environment.md").read_text()
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", page))
    from gluondist.launcher.options import flags
    generated = {flag.envvar for flag, _ in flags().values() if flag.envvar}  # by docs/hooks.py
    missing = sorted(used_envvars() - documented - generated)
    assert missing == [], f"docs/environment.md does not name {missing}"
    assert hooks().ENV_MARK in page
    table = hooks().env_table()
    assert all(f"| `{name}` |" in table for name in generated)


def test_troubleshooting_has_every_exit_code_and_failure_kind():
    from gluondist import wire
    from gluondist.launcher import outcome
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    table = page.split("## Exit codes")[1]
    rows = dict(re.findall(r"^\|\s*([^|]+?)\s*\|\s*([^|]*?)\s*\|", table, re.M))
    for code, kind in [(outcome.START_TIMEOUT_EXIT, outcome.Kind.START_TIMEOUT),
                       (outcome.LOST_EXIT, outcome.Kind.LOST_HOST),
                       (wire.REFUSED, outcome.Kind.REFUSED),
                       (wire.PORT_TAKEN, outcome.Kind.PORT_TAKEN),
                       (outcome.STALL_EXIT, outcome.Kind.STALL)]:
        assert rows.get(str(code)) == f"`{kind.value}`", (code, kind)
    kinds = {kind.strip("`") for kind in rows.values() if kind.startswith("`")}
    assert kinds == {k.value for k in outcome.Kind}
    assert {"0", "2", "128+*N*", "129, 130, 143"} <= set(rows)


def test_each_message_troubleshooting_explains_is_one_the_code_says():
    """Its headings quote the messages' words: each must be found in the code as it is (a
    message reworded there leaves the page explaining one nobody sees)."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    texts = [p.read_text() for p in (ROOT / "gluondist").rglob("*.py")]
    # the code as written, and each string literal as Python joins it: a message wrapped over
    # two literals at 100 columns ("... retrying on " "another") is still one message
    strings = [node.value for text in texts for node in ast.walk(ast.parse(text))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    source = "\n".join(texts + strings)
    quoted = [q for h in re.findall(r"^### (.+)$", page, re.M) for q in re.findall(r"`([^`]+)`", h)]
    assert len(quoted) >= 20
    assert [q for q in quoted if q not in source] == []


def test_every_test_lives_in_a_tier_contributing_describes():
    tests = ROOT / "tests"
    assert not list(tests.glob("test_*.py")), "a test file at tests/: put it in a tier's directory"
    tiers = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert tiers == {"unit", "launcher", "training", "e2e"}, tiers
    text = (ROOT / "CONTRIBUTING.md").read_text()
    for tier in tiers:
        assert f"| `tests/{tier}/` |" in text, f"CONTRIBUTING.md's table has no row for tests/{tier}/"


def test_contributing_maps_every_module_to_its_tests():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### Which tests cover a module", 1)[1].split("\n\n", 2)[2]
    rows = [line.split(" | ") for line in section.split("\n\n")[0].splitlines()[2:]]
    code = {c for row in rows for c in re.findall(r"`([\w/.]+)`", row[0])}
    tests = {t for row in rows for cell in row[1:] for t in re.findall(r"`([\w/.]+\.py)`", cell)}
    package = ROOT / "gluondist"
    for path in package.rglob("*.py"):
        rel = path.relative_to(package)
        named = str(rel) in code or any(str(rel).startswith(c) for c in code if c.endswith("/"))
        if rel.name == "__init__.py" and rel.parent.name:  # a package: a row for its modules
            named = named or any(c.startswith(f"{rel.parent}/") for c in code)
        assert named, f"CONTRIBUTING.md's test map has no row for gluondist/{rel}"
    files = {str(p.relative_to(ROOT / "tests")) for p in (ROOT / "tests").glob("*/test_*.py")}
    assert tests <= files, f"the test map names files that do not exist: {tests - files}"
    assert files <= tests, f"the test map leaves out {sorted(files - tests)}"
