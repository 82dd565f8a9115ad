"""A run directory's last write: summary.json always, the report pages unless turned off."""

import json

import pytest

from rlvr.train.rundir import RunDir


@pytest.mark.parametrize("report", [True, False])
def test_the_summary_is_written_and_the_report_only_when_asked(tmp_path, report):
    run = RunDir(tmp_path)
    run.log({"step": 0, "eval/accuracy": 0.2})
    for step, reward in ((1, 0.25), (2, 0.5)):
        run.log({"step": step, "reward": reward, "accuracy": reward, "loss": 0.1})
    state = {"base_eval": {"eval/accuracy": 0.2}, "final_eval": {"eval/accuracy": 0.4},
             "step": 2, "elapsed": 3.21}  # fmt: skip
    summary = run.write_summary(state, "abc123", report)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["steps"] == 2 and summary["wall_seconds"] == 3.2
    assert (tmp_path / "report.png").is_file() == report
    assert (tmp_path / "report.html").is_file() == report
