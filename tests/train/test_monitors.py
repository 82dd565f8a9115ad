"""Monitors over the metrics stream: when a rule fires, and what its actions do to a run."""

import json

import pytest

from rlvr.config import ConfigError, MonitorRule, load_config
from rlvr.train.faults import TrainingInterrupted
from rlvr.train.monitors import Monitors
from rlvr.train.trainer import Trainer


def test_a_rule_fires_once_when_its_streak_reaches_steps_and_again_after_a_break():
    monitors = Monitors([MonitorRule(metric="entropy", below=0.1, steps=2)])
    fired = []
    for step, value in enumerate([0.05, 0.2, 0.05, None, 0.05, 0.05, 0.3, 0.01, 0.01]):
        metrics = {} if value is None else {"entropy": value}
        fired += [(step, f.value) for f in monitors.observe(metrics)]
    # a step without the metric neither counts nor breaks the streak
    assert fired == [(4, 0.05), (8, 0.01)]
    assert monitors.state_dict() == {"streaks": [2]}


def test_rules_need_one_bound_and_get_a_name():
    assert MonitorRule(metric="grad_norm", above=10).name == "grad_norm_above_10"
    for bounds in ([], ["train.monitors=[{metric: 'x', above: 1, below: 0}]"]):
        overrides = bounds or ["train.monitors=[{metric: 'x'}]"]
        with pytest.raises(ConfigError, match="exactly one of above / below"):
            load_config(None, overrides)
    defaults = {r.name for r in load_config().train.monitors}
    assert defaults == {"entropy_collapse", "grad_norm_explodes"}


def records(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if "loss" in r}


def test_lower_lr_halves_the_rate_and_stop_checkpoints_and_stops(fast_overrides, tmp_path):
    always = '{metric: "reward", above: -1.0'  # every step's reward is above -1
    rules = f'train.monitors=[{always}, action: "lower_lr", name: "half"}}, {always}, steps: 2, action: "stop", name: "halt"}}]'
    cfg = load_config(None, [*fast_overrides, "train.steps=4", "train.lr=0.001", rules,
                             "log.name=mon"])  # fmt: skip
    with pytest.raises(TrainingInterrupted, match="monitor halt: reward .* above -1 for 2 steps"):
        Trainer(cfg).run()
    run = tmp_path / "runs" / "mon"
    steps = records(run)
    assert sorted(steps) == [1, 2]  # stopped after the step the stop rule fired on
    assert steps[1]["monitor/half"] == 1.0 and "monitor/half" not in steps[2]  # fires once
    assert steps[2]["monitor/halt"] == 1.0
    assert steps[1]["lr"] == pytest.approx(0.001) and steps[2]["lr"] == pytest.approx(0.0005)
    assert (run / "checkpoints" / "step-000002").is_dir()
    # the resumed run keeps the lowered rate and the streaks (halt does not fire again at once)
    resumed = Trainer(load_config(None, [*fast_overrides, "train.steps=3", "train.lr=0.001",
                                         rules, "log.name=mon"]), resume=run)  # fmt: skip
    resumed.run()
    assert records(run)[3]["lr"] == pytest.approx(0.0005)
    assert "monitor/halt" not in records(run)[3]


def test_the_default_entropy_rule_fires_on_a_collapsed_policy_and_not_on_a_healthy_one(
    fast_overrides, tmp_path, capsys
):
    # sampling at temperature 0.001 is a collapsed policy; a tiny lr keeps it so (at 1/T = 1000
    # times the logits, an ordinary step would move it)
    for name, temperature, lr in (("healthy", "1.0", "1e-4"), ("collapsed", "0.001", "1e-8")):
        cfg = load_config(None, [*fast_overrides, "train.steps=5", f"log.name={name}",
                                 f"rollout.temperature={temperature}", f"train.lr={lr}"])  # fmt: skip
        Trainer(cfg).run()
    healthy, collapsed = (
        records(tmp_path / "runs" / "healthy"),
        records(tmp_path / "runs" / "collapsed"),
    )
    assert not any(k.startswith("monitor/") for r in healthy.values() for k in r)
    assert all(r["entropy"] < 0.03 for r in collapsed.values())
    fired = [s for s, r in collapsed.items() if "monitor/entropy_collapse" in r]
    assert fired == [5]  # after 5 steps in a row below 0.03, once
    assert "monitor entropy_collapse: entropy" in capsys.readouterr().err
