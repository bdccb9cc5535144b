"""MkDocs hooks (mkdocs.yml `hooks:`): the command-line reference generated from the CLI's own
`--help`, the environment variables' table from the options' declarations, the Measured page's
bench tables from the saved results their plots are drawn from, and a check that every option,
repository file and `gluondist.*` name a page shows in code (or a docstring names in a Sphinx
role) exists. A name that does not is a warning, which `mkdocs build --strict` turns into a
failed build (tests/e2e/test_docs_site.py runs it)."""
from __future__ import annotations

import logging
import re
from html import escape
from pathlib import Path

import click
import griffe

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("mkdocs.plugins.gluondist")

CLI_MARK = "<!-- gluondist --help -->"
ENV_MARK = "<!-- gluondist launch environment -->"
BENCH_MARK = re.compile(r"<!-- bench table: (\S+\.json) -->")
WORKERS_MARK = re.compile(r"<!-- workers table: (\S+\.json) -->")
ACCURACY_MARK = re.compile(r"<!-- compression table: (\S+\.json) -->")
# Options of other programs that pages show alone (not after their command), and the file
# that defines each: checked there instead.
FOREIGN = {"--ctx": "examples/digits.py", "--repeats": "benchmarks/launcher_overhead.py",
           "--trivial-repeats": "benchmarks/launcher_overhead.py"}
# Options of programs outside the repository that pages name alone (sbatch's, ssh's): not
# checked here, since their programs are not
OUTSIDE = {"--cpus-per-task", "--exclusive", "--export", "--ntasks", "--nodes"}
REPO_DIRS = ("gluondist/", "tests/", "benchmarks/", "examples/", "launch/", "docs/", ".ci/")
SPAN = re.compile(r"(?<!`)`((?:[^`\n]|\n(?!\s*\n))+)`(?!`)")  # may wrap, not span paragraphs
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
PATH = re.compile(r"(?<![\w./-])((?:%s)[\w./-]*)" % "|".join(re.escape(d) for d in REPO_DIRS))
NAME = re.compile(r"(?<![\w./-])gluondist((?:\.[A-Za-z_]\w*)+)(?![\w/-])")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):<code>(~?)([\w.]+)</code>")
# `gluondist X` where a shell would run it (a line's start, after `&&`, `|`, `;`, a path or
# VAR=value), not in prose or Python (`from gluondist import`, `gluondist is not installed`)
COMMAND = re.compile(r"(?:^\s*|&&\s*|\|\s*|;\s*|/|\b[A-Z_]+=\S*\s+)gluondist "
                     r"((?:bench |manifest )?[a-z]+)|python3? ((?:benchmarks|examples)/\w+\.py)")


def _commands() -> dict:
    """{'launch': {'--num-workers', ...}, 'bench kvstore': {...}, ...} from the click group."""
    from gluondist.cli import cli
    found = {}

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, path + [name])
        found[" ".join(path)] = {o for p in cmd.params for o in p.opts + p.secondary_opts
                                 if o.startswith("--")} | {"--help"}
    walk(cli, [])
    return found


def _script_options(path: str) -> set:
    """The options a script declares, and those of the modules beside it that it imports
    its command line from (benchmarks/syncbn.py takes fusion.py's)."""
    text = (ROOT / path).read_text()
    found = set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", text))
    for module in re.findall(r"^from (\w+) import", text, re.M):
        beside = (ROOT / path).parent / f"{module}.py"
        if beside.exists() and beside != ROOT / path:
            found |= _script_options(beside.relative_to(ROOT).as_posix())
    return found


def cli_help() -> str:
    """Every command's `--help`, as click prints it, one section per command."""
    from gluondist.cli import cli
    out = []

    def walk(cmd, path):
        ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=100)
        out.append(f"## `{' '.join(path)}`\n\n```text\n{cmd.get_help(ctx)}\n```\n")
        if isinstance(cmd, click.Group):
            for name in sorted(cmd.commands):
                walk(cmd.commands[name], path + [name])
    walk(cli, ["gluondist"])
    return "\n".join(out)


def env_table() -> str:
    """The variables `gluondist launch` reads for its options, from their declarations
    (LaunchOptions' Flags: the same that make the click options and their --help)."""
    from gluondist.launcher.options import flags
    rows = ["| Variable | Option | Default | Meaning |", "| --- | --- | --- | --- |"]
    for flag, default in flags().values():
        if flag.envvar is None:
            continue
        shown = "none" if default in (None, (), {}) else f"`{default}`"
        names = ", ".join(f"`{n}`" for n in flag.names)
        meaning = escape(flag.help, quote=False).replace("|", "\\|")  # a table's cell
        rows.append(f"| `{flag.envvar}` | {names} | {shown} | {meaning} |")
    return "\n".join(rows) + "\n"


def bench_table(path: str) -> str:
    """A saved `gluondist bench kvstore --json` line as the Measured page's table, so the table
    and the plot drawn from the same file are one run."""
    import json
    rows = json.loads((ROOT / path).read_text())["rows"]
    out = ["| S | layout | step s | model s | error | link eff | whole s |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        whole = r.get("unchunked_step_s")
        error = r["predicted_step_s"] / r["step_s"] - 1  # as the bench's plot labels it
        out.append(f"| {r['servers']} | {r['layout']} | {r['step_s']:.3f} | "
                   f"{r['predicted_step_s']:.3f} | {error:+.0%} | "
                   f"{r['link_efficiency']:.0%} | {'' if whole is None else f'{whole:.3f}'} |")
    return "\n".join(out) + "\n"


def workers_table(path: str) -> str:
    """A saved `benchmarks/workers.py --json` sweep as a table, from the file its plot is
    drawn from (benchmarks/plots.py's workers.png)."""
    import json
    rows = json.loads((ROOT / path).read_text())["rows"]
    out = ["| W | layout | step s | MB/s | model MB/s | error | link eff |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        model, eff = r["predicted_step_s"], r["link_efficiency"]
        error = "" if model is None else f"{model / r['step_s'] - 1:+.0%}"
        out.append(f"| {r['workers']} | {r['layout']} | {r['step_s']:.3f} | "
                   f"{r['mb_per_s']:.1f} | "
                   f"{'' if model is None else format(r['predicted_mb_per_s'], '.1f')} | "
                   f"{error} | {'' if eff is None else format(eff, '.0%')} |")
    return "\n".join(out) + "\n"


def compression_table(path: str) -> str:
    """A saved benchmarks/compression_accuracy.py result as the Measured page's table (the
    plot is drawn from the same file): each model's last epoch per compression."""
    import json
    runs = json.loads((ROOT / path).read_text())["runs"]
    out = ["| model | compression | val accuracy | val loss | samples/s |",
           "| --- | --- | --- | --- | --- |"]
    for name in runs[0]["models"]:
        for run in runs:
            h = run["models"][name]
            out.append(f"| {name} | {run['compression']} | {h['val_accuracy'][-1]:.4f} | "
                       f"{h['val_loss'][-1]:.4f} | {h['samples_per_s'][-1]:.0f} |")
    return "\n".join(out) + "\n"


class Checker:
    def __init__(self):
        self.commands = _commands()
        self.all_options = set().union(*self.commands.values())
        self.package = griffe.load("gluondist", search_paths=[str(ROOT)], resolve_aliases=False)
        import gluondist
        self.lazy = vars(gluondist)["_LAZY"]  # gluondist.fit is gluondist.training.loop.fit

    def name_exists(self, dotted: str) -> bool:
        """Whether ``gluondist.<dotted>`` is defined (statically, by griffe: nothing imported)."""
        parts = dotted.split(".")
        if parts[0] in self.lazy:
            module, attr = self.lazy[parts[0]]
            parts = module.split(".")[1:] + ([attr] if attr else []) + parts[1:]
        if not parts:
            return True
        try:
            self.package[".".join(parts)]
        except (KeyError, ValueError):
            return False
        return True

    def option_problems(self, code: str) -> list:
        problems = []
        for line in code.splitlines():
            line = re.sub(r"\s#\s.*", "", line)  # a shell comment
            line = line.split(" -- ")[0]  # after `--` comes the user's own command
            owner = COMMAND.search(line)
            if owner and owner.group(1) is not None:
                sub = owner.group(1)
                known = self.commands.get(sub)
                if known is None:
                    problems.append(f"`gluondist {sub}` is no command")
                    continue
                args = re.split(r"\s\S+\.py\b", line[owner.end():])[0]  # the script's own after
                problems += [f"{o} is no option of `gluondist {sub}`"
                             for o in OPTION.findall(args) if o not in known]
            elif owner:
                known = _script_options(owner.group(2)) | {"--help"}
                problems += [f"{o} is no option of {owner.group(2)}"
                             for o in OPTION.findall(line[owner.end():]) if o not in known]
            elif OPTION.match(line.lstrip()):
                option = OPTION.match(line.lstrip()).group(1)
                if option in FOREIGN:
                    if option not in _script_options(FOREIGN[option]):
                        problems.append(f"{option} is no option of {FOREIGN[option]}")
                elif option not in self.all_options | OUTSIDE:
                    problems.append(f"{option} is no option of any gluondist command")
        return problems

    def problems(self, markdown: str) -> list:
        codes = [m.group(1) for m in SPAN.finditer(FENCE.sub("", markdown))]
        codes += [m.group(1) for m in FENCE.finditer(markdown)]
        found = []
        for code in codes:
            for path in PATH.findall(code):
                target = path.split("::")[0].rstrip(".")
                if not (ROOT / target).exists():
                    found.append(f"{target}: no such file in the repository")
            for dotted in NAME.findall(code):
                if not self.name_exists(dotted[1:]):
                    found.append(f"gluondist{dotted}: no such name in the package")
            found += self.option_problems(code)
        return found


def layout_problems(markdown: str) -> list:
    """What GitHub renders as a list but Python-Markdown does not: a list right after a
    paragraph line, or a list nested by 2 spaces (it needs 4)."""
    problems, prev = [], ""
    for n, line in enumerate(FENCE.sub("", markdown).splitlines(), 1):
        if line.startswith("- ") and prev.strip() and not prev.startswith(("-", " ", "#", "<")):
            problems.append(f"line {n}: a list needs a blank line before it")
        if re.match(r"^ {1,3}[-*] ", line):
            problems.append(f"line {n}: a nested list needs 4 spaces of indent")
        prev = line
    return problems


_checker = None


def on_page_markdown(markdown, page, config, files):
    global _checker
    _checker = _checker or Checker()
    for problem in dict.fromkeys(_checker.problems(markdown) + layout_problems(markdown)):
        log.warning(f"{page.file.src_uri}: {problem}")
    # generated from the code, so checked by it
    markdown = BENCH_MARK.sub(lambda m: bench_table(m.group(1)), markdown)
    markdown = WORKERS_MARK.sub(lambda m: workers_table(m.group(1)), markdown)
    markdown = ACCURACY_MARK.sub(lambda m: compression_table(m.group(1)), markdown)
    return markdown.replace(CLI_MARK, cli_help()).replace(ENV_MARK, env_table())


def on_page_content(html, page, config, files):
    """The docstrings' Sphinx roles (:class:`~gluondist.callbacks.History`) as plain code,
    their targets checked like the pages' names."""
    def code(m):
        tilde, target = m.groups()
        if target.startswith("gluondist.") and not _checker.name_exists(target[10:]):
            log.warning(f"{page.file.src_uri}: a docstring names {target}: no such name")
        return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"
    return ROLE.sub(code, html)
