import pytest

from rlvr.api import runner
from rlvr.config import ConfigError, load_config
from rlvr.methods.rspo import RSPO, outcome_only, relabelled_replay
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Trajectory


def episode(group_id: int, turn_rewards: list[float], correct: bool) -> Trajectory:
    return Trajectory(
        Problem("p", "guess"), group_id, 0, [1, 2, 3], [0, 1, 1], [0.0, -1.0, -2.0],
        turn_rewards, [2, 3], correct=correct,
    )  # fmt: skip


def test_outcome_only_keeps_the_last_turn_as_the_solved_flag():
    assert outcome_only(episode(0, [0.1, 0.1, 1.0], True)).turn_rewards == [0.0, 0.0, 1.0]
    assert outcome_only(episode(0, [0.1, 0.0], False)).turn_rewards == [0.0, 0.0]
    # a game cut off by the turn budget ends on a process reward, not an outcome
    assert outcome_only(episode(0, [0.1, 0.1], False)).turn_rewards == [0.0, 0.0]


def test_the_replay_is_a_relabelled_copy_in_groups_after_the_main_policys():
    explored = [episode(0, [0.1, 1.0], True), episode(1, [0.1, 0.1], False)]
    replayed = relabelled_replay(explored, first_group=4)
    assert [t.group_id for t in replayed] == [4, 5]
    assert [t.turn_rewards for t in replayed] == [[0.0, 1.0], [0.0, 0.0]]
    assert [t.turn_rewards for t in explored] == [[0.1, 1.0], [0.1, 0.1]]  # the explorer's own
    assert [t.group_id for t in explored] == [0, 1]


def test_rspo_needs_importance_weights_and_a_single_pair(fast_overrides):
    with pytest.raises(ConfigError, match="fix: algo.tis=token"):
        RSPO(load_config(None, [*fast_overrides, "algo.rspo_explorer=true"]))
    with pytest.raises(ConfigError, match="rollout.replay trains otherwise"):
        load_config(None, ["algo.rspo_explorer=true", "algo.tis=token", "rollout.replay=x.jsonl"])


def test_the_main_policy_learns_its_own_and_the_explorers_replies_on_outcomes(
    fast_overrides, monkeypatch
):
    """A step of guess-the-number: the explorer learns from the env's process rewards, the
    main policy from its own episodes and the explorer's, outcomes only."""
    seen: dict[str, list] = {"main": [], "explorer": []}
    learn = Trainer.learn

    def spy(self, sampled):
        role = self.cfg.log.name
        seen[role].append(
            [(t.group_id, t.response_text, list(t.turn_rewards)) for t in sampled.trajectories]
        )
        return learn(self, sampled)

    monkeypatch.setattr(Trainer, "learn", spy)
    cfg = load_config(None, [
        *fast_overrides, "task.name=guess_number", "rollout.max_turns=4", "train.steps=1",
        "algo.rspo_explorer=true", "algo.tis=token",
    ])  # fmt: skip
    assert runner(cfg) is RSPO
    summary = RSPO(cfg).run()
    assert set(summary) == {"steps", "main", "explorer"}
    for main, explorer in zip(seen["main"], seen["explorer"]):
        own, replayed = main[:16], main[16:]
        assert [text for _, text, _ in replayed] == [text for _, text, _ in explorer]
        assert [g for g, _, _ in replayed] == [g + 4 for g, _, _ in explorer]  # after 4 groups
        assert all(r in (0.0, 1.0) for _, _, rewards in main for r in rewards)
        assert any(0 < r < 1 for _, _, rewards in explorer for r in rewards)  # process rewards
        assert [text for _, text, _ in own] != [text for _, text, _ in explorer]  # seed + 1
