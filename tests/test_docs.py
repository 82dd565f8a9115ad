"""The README and docs/ stay true: local links resolve, TOML blocks load as configs, every
`rlvr` command line names a real command with valid keys, and Python blocks parse. The README
stays a short front door, every docs page is reachable from docs/index.md, and every
registered name is documented in docs/registry.md."""

import ast
import json
import re
import shlex
from pathlib import Path

import pytest

from rlvr.catalog import CACHE
from rlvr.cli import parser
from rlvr.config import load_config

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to '-'."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_local_links_resolve(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = page.parent / path if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name}: no heading for {target}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_toml_blocks_load_as_configs(page, tmp_path):
    for index, block in enumerate(blocks(page, "toml")):
        path = tmp_path / f"block{index}.toml"
        path.write_text(block)
        load_config(path)


def command_lines(page: Path) -> list[list[str]]:
    lines = []
    for block in blocks(page, "bash"):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split(" # ")[0].strip()
            for part in line.split("&&"):
                words = shlex.split(part)
                if words[:1] == ["rlvr"]:
                    lines.append(words[1:])
    return lines


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_command_lines_name_real_commands_and_keys(page):
    if page.name == "README.md":
        assert len(command_lines(page)) >= 10  # the two commands, training, Ray, vLLM ...
    for words in command_lines(page):
        args = parser().parse_args(words)  # an unknown command or flag exits here
        if words[0] != "train" or args.resume:
            continue
        config = args.config if args.config and "=" not in args.config else None
        overrides = [*([args.config] if config is None and args.config else []), *args.overrides]
        if config is not None and not (ROOT / config).is_file():
            config = None  # a file of the user's (my_run.toml): its keys are theirs
        load_config(ROOT / config if config else None, overrides)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_blocks_parse(page):
    for block in blocks(page, "python"):
        ast.parse(block)


def test_the_readme_stays_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_index_links_every_docs_page():
    index = ROOT / "docs" / "index.md"
    linked = {
        target.partition("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", index.read_text())
    }
    pages = {page.name for page in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert sorted(pages - linked) == []


def test_every_registered_name_is_documented():
    registry = (ROOT / "docs" / "registry.md").read_text()
    missing = [
        f"{kind}: {name}"
        for kind, names in json.loads(CACHE.read_text()).items()
        for name in names
        if f"`{name}`" not in registry
    ]
    assert missing == [], "add a line for each to docs/registry.md"
