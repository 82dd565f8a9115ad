"""The quiet display's plain lines: each names its phase and total, and shows the chosen metrics."""

from rlvr.train.display import Display


def test_quiet_lines_name_the_phase_and_its_total(capsys):
    display = Display(quiet=True)
    with display.bar("warm start (once per settings)", 40) as bar:
        for step in (1, 2):
            bar.update(step, {"sft_loss": 1.5 / step, "unshown": 7.0})
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].endswith("warm start (once per settings) 2/40  loss 0.750")  # every 2nd step
    assert len(lines) == 1 and "unshown" not in lines[0]
    with display.bar("rl", 3) as bar:
        bar.update(3, {"reward": 0.5, "debate/fixed": 0.25})
    assert capsys.readouterr().err.strip().endswith("rl 3/3  reward 0.500  fixed 0.250")
