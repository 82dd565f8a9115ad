import pytest

from rlvr.train.canary import HackingMonitor
from rlvr.types import Problem, Trajectory

PROBLEM = Problem(id="p", prompt="2+3=", answer="5")


def batch(reward: float, correct: float, formatted: float, n: int = 10) -> list[Trajectory]:
    """n trajectories with the given mean reward, share correct and share ending in '#### x'."""
    return [
        Trajectory(
            problem=PROBLEM,
            group_id=0,
            sample_index=i,
            token_ids=[],
            loss_mask=[],
            behaviour_logprobs=[],
            turn_rewards=[reward],
            turn_ends=[],
            correct=i < correct * n,
            response_text="#### 5" if i < formatted * n else "5",
        )  # fmt: skip
        for i in range(n)
    ]


def run(monitor, steps):
    return [monitor.observe_step(batch(*step)) for step in steps]


def test_format_canary_fires_when_reward_rises_on_format_alone():
    monitor = HackingMonitor(window=2, margin=0.1)
    metrics = run(monitor, [(0.2, 0.3, 0.0)] * 2 + [(0.6, 0.3, 0.9)] * 2)
    # the third step already lifts the recent mean to 0.4: a gain of 0.2 over the first two
    assert [m["canary/format"] for m in metrics] == [0.0, 0.0, 1.0, 1.0]
    assert metrics[-1]["canary/reward_gain"] == pytest.approx(0.4)
    assert metrics[-1]["canary/format_reward"] == pytest.approx(0.9)
    assert len(monitor.new_warnings(metrics[-1])) == 1
    assert monitor.new_warnings(metrics[-1]) == []  # announced once


def test_no_canary_when_accuracy_rises_with_the_reward():
    monitor = HackingMonitor(window=2, margin=0.1)
    monitor.observe_eval(0.3)
    monitor.observe_eval(0.6)
    metrics = run(monitor, [(0.2, 0.2, 0.0)] * 2 + [(0.7, 0.7, 1.0)] * 2)
    assert metrics[-1]["canary/format"] == 0.0 and metrics[-1]["canary/heldout"] == 0.0
    assert monitor.new_warnings(metrics[-1]) == []


def test_heldout_canary_needs_an_eval_after_the_base_and_fires_when_it_did_not_improve():
    monitor = HackingMonitor(window=2, margin=0.1)
    monitor.observe_eval(0.5)  # base eval only: held-out accuracy has not been re-measured
    rising = [(0.2, 0.2, 1.0)] * 2 + [(0.8, 0.8, 1.0)] * 2
    assert run(monitor, rising)[-1]["canary/heldout"] == 0.0
    monitor.observe_eval(0.45)
    metrics = monitor.observe_step(batch(0.8, 0.8, 1.0))
    assert metrics["canary/heldout"] == 1.0
    assert metrics["canary/heldout_gain"] == pytest.approx(-0.05)


def test_state_round_trips_for_resume():
    monitor = HackingMonitor(window=2)
    monitor.observe_eval(0.5)
    run(monitor, [(0.2, 0.2, 0.0)] * 3)
    restored = HackingMonitor(window=2)
    restored.load_state_dict(monitor.state_dict())
    step = (0.9, 0.2, 1.0)
    assert restored.observe_step(batch(*step)) == monitor.observe_step(batch(*step))
