from rlvr.analysis.report import plot_run


def test_report_png_is_written(tmp_path):
    records = [{"step": 0, "eval/accuracy": 0.3, "eval/pass@4": 0.9}]
    records += [{"step": s, "reward": s / 10, "accuracy": s / 10} for s in range(1, 6)]
    records += [{"step": 5, "eval/accuracy": 0.8, "eval/pass@4": 1.0}]
    path = plot_run(records, tmp_path / "report.png", "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
