import json
import subprocess
import sys

from rlvr.catalog import CACHE, KINDS, build, registry, rows


def test_the_cache_holds_exactly_the_live_registries():
    cached = json.loads(CACHE.read_text())
    assert cached == build(), "rlvr/catalog.json is stale; rewrite it: python -m rlvr.catalog"
    assert list(cached) == list(KINDS)
    assert {name for name, _ in rows("losses")} >= set(registry("losses"))


def test_listing_imports_no_torch():
    code = "import sys; from rlvr.cli import main; main(['list']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "grpo" in out.stdout and out.stdout.strip().endswith("False")


def test_installed_plugins_are_listed_after_the_built_ins(tmp_path, monkeypatch):
    info = tmp_path / "my_rlvr_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-rlvr-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlvr.losses]\nmy_loss = my_pkg.losses:my_loss\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = rows("losses")
    assert found[-1] == ("my_loss", "plugin: my_pkg.losses:my_loss")
    assert "my_loss" not in dict(rows("rewards"))


def test_descriptions_are_whole_first_paragraphs_not_cut_lines():
    from rlvr.registry import describe

    def documented():
        """First line of a summary
        that goes on here.

        Details that are not listed."""

    assert describe({"x": documented}) == [("x", "First line of a summary that goes on here.")]
    for kind, entries in json.loads(CACHE.read_text()).items():
        if kind == "presets":  # shapes, not sentences
            continue
        for name, doc in entries.items():
            assert doc.endswith((".", ")")), f"{kind}.{name}: {doc!r} ends mid-sentence"
