"""The run page in a real browser: headless Chromium (Debian's package, driven by Playwright)
opens a short run's report.html from disk; every chart renders with data, nothing logs an
error, and the sample browser shows the run's samples. The screenshot is kept as an artifact
($RLVR_ARTIFACTS, else the test's temporary directory). Skipped, saying why, without them."""

import json
import os
import shutil
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.train.trainer import Trainer


def test_the_report_renders_in_headless_chromium(fast_overrides, tmp_path):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("needs Debian's chromium: apt-get install chromium")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs playwright: pip install playwright"
    )
    Trainer(
        load_config(None, [*fast_overrides, "train.steps=2", "log.name=shown", "log.report=true"])
    ).run()
    run = tmp_path / "runs" / "shown"
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    artifacts = Path(os.environ.get("RLVR_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((run / "report.html").as_uri())
        charts = page.locator(".plots svg")
        assert charts.count() >= 5
        for index in range(charts.count()):
            chart = charts.nth(index)
            box = chart.bounding_box()
            assert box["width"] > 200 and box["height"] > 100
            # matplotlib draws each plotted series as a line2d group holding a path
            assert chart.locator("g[id^='line2d'] path").count() > 0, f"chart {index} is empty"
        shown = page.locator("div.step.shown tr")  # the last step's samples, under a header row
        assert shown.count() == 1 + sum(s["step"] == 2 for s in samples)
        first = samples[-1]["response"].strip().splitlines()[0][:8]
        assert first in page.locator("div.step.shown").inner_text()
        page.select_option("select", "step-1")
        assert page.locator("div.step.shown").get_attribute("id") == "step-1"
        assert page.locator("div.step.shown tr").count() == 1 + sum(s["step"] == 1 for s in samples)
        page.screenshot(path=str(artifacts / "report.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert (artifacts / "report.png").stat().st_size > 10_000
