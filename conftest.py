"""--strict-skips, which CI runs: a test that skips fails the run unless tests/allowed_skips.toml
names it, with a reason. A plain `pytest` keeps skipping gracefully where an extra is missing.
This conftest imports neither torch nor rlvr, so that tests/test_strict_skips.py can run it on
small test files of its own; the suite's fixtures are in tests/conftest.py."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytest_plugins = ["pytester"]  # for tests/test_strict_skips.py


ALLOWED_SKIPS = Path(__file__).parent / "tests" / "allowed_skips.toml"


def pytest_addoption(parser):
    parser.addoption(
        "--strict-skips",
        action="store_true",
        help="fail the run if a test skips that tests/allowed_skips.toml does not allow",
    )


def pytest_configure(config):
    if config.getoption("strict_skips"):
        config.pluginmanager.register(MarkerNames())
        # under xdist the controller sees every worker's reports: the workers need not check
        if not hasattr(config, "workerinput"):
            config.pluginmanager.register(StrictSkips(load_allowed_skips(ALLOWED_SKIPS)))


class MarkerNames:
    """Puts the names of a test's marks on its reports, which xdist carries to the controller
    (a report's keywords would not do: they hold parameter ids too, so a test parametrized
    with id "vllm" would pass for one marked vllm)."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        report.marker_names = sorted({mark.name for mark in item.iter_markers()})
        return report


def load_allowed_skips(path: Path) -> list[dict]:
    """The allow-list's entries: each a `reason` and either a `nodeid` pattern (`*` matches any
    run of characters; nothing else is special, so a parameter's brackets match themselves) or
    a `marker` the test carries, and optionally `unless_installed`, a module whose presence
    withdraws the entry (the tests must then run)."""
    if not path.is_file():
        raise pytest.UsageError(f"--strict-skips needs its allow-list, {path}")
    entries = tomllib.loads(path.read_text()).get("allow", [])
    for entry in entries:
        keys = set(entry)
        if not entry.get("reason") or len(keys & {"nodeid", "marker"}) != 1:
            raise pytest.UsageError(f"{path.name}: {entry} needs a reason and a nodeid or marker")
        if keys - {"nodeid", "marker", "reason", "unless_installed"}:
            raise pytest.UsageError(f"{path.name}: unknown keys in {entry}")
    return entries


class StrictSkips:
    def __init__(self, entries: list[dict]):
        self.entries = [
            e
            for e in entries
            if not e.get("unless_installed")
            or importlib.util.find_spec(e["unless_installed"]) is None
        ]
        self.allowed: list[tuple[str, str]] = []  # (nodeid, the entry's reason)
        self.unexpected: list[tuple[str, str]] = []  # (nodeid, why it skipped)

    def allowance(self, report) -> str | None:
        markers = getattr(report, "marker_names", [])  # a collection-time skip carries none
        for entry in self.entries:
            if "marker" in entry and entry["marker"] in markers:
                return entry["reason"]
            pattern = re.escape(entry.get("nodeid", "")).replace(r"\*", ".*")
            if "nodeid" in entry and re.fullmatch(pattern, report.nodeid):
                return entry["reason"]
        return None

    def check(self, report) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        reason = self.allowance(report)
        if reason is not None:
            self.allowed.append((report.nodeid, reason))
        else:
            longrepr = report.longrepr
            why = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.unexpected.append((report.nodeid, why))

    def pytest_runtest_logreport(self, report):
        self.check(report)

    def pytest_collectreport(self, report):
        self.check(report)

    def pytest_sessionfinish(self, session):
        if self.unexpected and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.allowed:
            terminalreporter.write_sep("-", f"{len(self.allowed)} allowed skips")
            for reason in sorted({reason for _, reason in self.allowed}):
                count = sum(r == reason for _, r in self.allowed)
                terminalreporter.write_line(f"{count} x {reason}")
        if self.unexpected:
            terminalreporter.write_sep(
                "=", f"{len(self.unexpected)} unexpected skips (--strict-skips)", red=True
            )
            for nodeid, why in self.unexpected:
                terminalreporter.write_line(f"{nodeid}: {why}")
            terminalreporter.write_line(
                f"a test CI is meant to run skipped; make it run, or allow it in "
                f"{ALLOWED_SKIPS.relative_to(Path(__file__).parent)} with a reason"
            )
