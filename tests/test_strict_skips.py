"""--strict-skips (the repository's conftest.py), run on small test files with that conftest and
an allow-list of each test's making: a skip the list does not name fails the run, one it names
(by node id or by mark, withdrawn where its module is installed) passes, and a plain run keeps
skipping gracefully."""

import textwrap
from pathlib import Path

import pytest

CONFTEST = Path(__file__).parents[1] / "conftest.py"

TESTS = """
import pytest

def test_runs():
    pass

def test_skips():
    pytest.skip("an extra is missing")

@pytest.mark.parametrize("engine", ["hf", pytest.param("fast", marks=pytest.mark.slow), "slow"])
def test_engine(engine):
    if engine != "hf":
        pytest.skip(f"no {engine} engine here")
"""


@pytest.fixture
def project(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: a mark allowed_skips.toml can name\n")
    pytester.makepyfile(test_cases=TESTS)

    def run(allowed: str, *args):
        (pytester.path / "tests").mkdir(exist_ok=True)
        (pytester.path / "tests" / "allowed_skips.toml").write_text(textwrap.dedent(allowed))
        return pytester.runpytest("-p", "no:cacheprovider", "-n", "0", *args)

    return run


EVERY_SKIP = """
    [[allow]]
    nodeid = "test_cases.py::test_skips"
    reason = "needs an extra"

    [[allow]]
    nodeid = "test_cases.py::test_engine[*]"
    reason = "no engines here"
"""


def test_a_skip_the_list_does_not_name_fails_the_run(project):
    result = project(EVERY_SKIP.replace("test_skips", "test_other"), "--strict-skips")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, skipped=3)
    result.stdout.fnmatch_lines([
        "*2 allowed skips*",
        "2 x no engines here",
        "*1 unexpected skips (--strict-skips)*",
        "test_cases.py::test_skips: Skipped: an extra is missing",
        "a test CI is meant to run skipped; make it run, or allow it in tests/allowed_skips.toml *",
    ])  # fmt: skip


def test_skips_the_list_names_pass_and_a_plain_run_skips_gracefully(project):
    result = project(EVERY_SKIP, "--strict-skips")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*3 allowed skips*", "1 x needs an extra", "2 x no engines here"])
    result = project("", "-rs")  # no --strict-skips: nothing is checked
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2, skipped=3)
    result.stdout.no_fnmatch_line("*unexpected skips*")


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_mark_allows_the_tests_that_carry_it_and_no_parameter_of_its_name(project, workers):
    """Under xdist the marks reach the controller on the reports."""
    allowed = """
        [[allow]]
        marker = "slow"
        reason = "slow tests run elsewhere"

        [[allow]]
        nodeid = "test_cases.py::test_skips"
        reason = "needs an extra"
    """
    result = project(allowed, "--strict-skips", "-n", workers)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*1 unexpected skips*", "test_cases.py::test_engine[[]slow[]]: *"])
    result.stdout.no_fnmatch_line("test_cases.py::test_engine[[]fast[]]: *")


def test_an_entry_is_withdrawn_where_its_module_is_installed(project):
    entry = """
        [[allow]]
        nodeid = "test_cases.py::test_*"
        unless_installed = "{}"
        reason = "runs where that module is"
    """
    assert project(entry.format("no_such_module_here"), "--strict-skips").ret == 0
    result = project(entry.format("json"), "--strict-skips")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*3 unexpected skips*"])


def test_a_module_that_skips_at_import_is_checked_by_its_path(project, pytester):
    pytester.makepyfile(test_needs="import pytest\npytest.importorskip('no_such_module_here')\n")
    result = project(EVERY_SKIP, "--strict-skips")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*1 unexpected skips*", "test_needs.py: *no_such_module_here*"])
    allowed = EVERY_SKIP + '[[allow]]\nnodeid = "test_needs.py"\nreason = "r"\n'
    assert project(allowed, "--strict-skips").ret == pytest.ExitCode.OK


def test_an_entry_without_a_reason_is_refused(project):
    result = project('[[allow]]\nnodeid = "test_cases.py::test_skips"\n', "--strict-skips")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*needs a reason and a nodeid or marker*"])
