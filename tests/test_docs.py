from conftest import ROOT


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
