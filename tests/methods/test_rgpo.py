"""RGPO: hint levels, hinted prompts and kept revisions by hand; through the trainer, failed
groups get hinted re-rollouts, the revisions that beat them are imitated on the unhinted prompt,
and the hint levels survive a checkpoint."""

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.methods.rgpo import Guidance, kept_revisions, on_original_prompt
from rlvr.rewards import REWARDS
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.update import micro_logprobs
from rlvr.types import Problem, Score, Trajectory


def rollout(problem: str, tokens: list[int], reply_from: int, reward: float, status="ok"):
    mask = [0] * reply_from + [1] * (len(tokens) - reply_from)
    return Trajectory(
        Problem(problem, "x"), 0, 0, tokens, mask, [-0.5] * len(tokens), [reward], [len(tokens)],
        status=status, correct=reward > 0,
    )  # fmt: skip


def test_revisions_are_kept_only_when_they_beat_every_unguided_rollout():
    unguided = [rollout("a", [1, 2, 9], 2, 0.0), rollout("a", [1, 2, 8], 2, 0.5)]
    unguided += [rollout("b", [1, 3, 7], 2, 0.0)]
    revised = [
        rollout("a", [1, 2, 5, 5, 9], 4, 0.5),  # ties the best: not kept
        rollout("a", [1, 2, 5, 5, 6], 4, 1.0),
        rollout("b", [1, 3, 5, 5, 6], 4, 1.0, status="infra_error"),
        rollout("b", [1, 3, 5, 5, 4, 4], 4, 1.0),
    ]
    kept = kept_revisions(unguided, revised)
    assert [(r.token_ids, u.problem.id) for r, u in kept] == [
        ([1, 2, 5, 5, 6], "a"),
        ([1, 3, 5, 5, 4, 4], "b"),
    ]


def test_a_kept_revision_is_taught_on_the_prompt_without_the_hint():
    unguided = rollout("a", [1, 2, 9], 2, 0.0)  # prompt [1, 2]
    revised = rollout("a", [1, 2, 5, 5, 6, 7], 4, 1.0)  # hinted prompt [1, 2, 5, 5]
    out = on_original_prompt(revised, unguided)
    assert out.token_ids == [1, 2, 6, 7]
    assert out.loss_mask == [0, 0, 1, 1]
    assert out.behaviour_logprobs == [0.0, 0.0, -0.5, -0.5]
    assert out.turn_ends == [4] and out.reward == 1.0


def test_levels_rise_on_failure_fall_on_success_and_stay_in_range():
    guidance = Guidance(segments=2)
    fail, win = rollout("a", [1, 2], 1, 0.0), rollout("a", [1, 2], 1, 1.0)
    problem = fail.problem
    assert guidance.hint(problem, "one\ntwo\n") is None  # never failed
    guidance.observe([fail, fail])
    assert guidance.hint(problem, "one\ntwo\n").prompt == "x\n\nHint: one\n"
    for _ in range(3):
        guidance.observe([fail])
    assert guidance.levels["a"] == 2  # all segments at most
    guidance.observe([fail, win])  # one correct rollout solves the group
    assert guidance.levels["a"] == 1
    state = guidance.state_dict()
    guidance.observe([win, win])
    assert "a" not in guidance.levels  # solved problems leave the state
    guidance.load_state_dict(state)
    assert guidance.levels["a"] == 1


def hint_seen(problem, response):
    """Right exactly when the prompt carries a hint: unguided rollouts always fail, revised ones
    always win, so every group is hinted and every revision is kept."""
    return Score(float("Hint:" in str(problem.prompt)), "ok")


def rgpo_config(fast_overrides, *extra):
    return load_config(None, fast_overrides + [
        "methods.rgpo.segments=2", "methods.rgpo.sft_coef=1.0", "train.lr=1e-3", "log.name=rgpo", *extra,
    ])  # fmt: skip


def test_failed_groups_are_hinted_and_their_revisions_imitated(fast_overrides, monkeypatch):
    monkeypatch.setitem(REWARDS, "numeric", hint_seen)  # the arithmetic task's verifier
    trainer = Trainer(rgpo_config(fast_overrides, "train.steps=3"))
    seen = []
    original = trainer.updater.update

    def spy(model, data, *args):
        assert data.imitation.coef == 1.0 and data.imitation.metric == "rgpo/imitation_nll"
        seen.append(data.imitation.batch)
        return original(model, data, *args)

    trainer.updater.update = spy
    trainer.run()
    records = {r["step"]: r for r in trainer.run_dir.read_metrics() if "loss" in r}
    assert records[1]["rgpo/hinted_groups"] == 1.0 and records[1]["rgpo/rescued_groups"] == 1.0
    assert records[1]["rgpo/mean_level"] == 1.0  # every problem failed once
    imitation = seen[0]
    assert len(imitation) == 16  # group_size 4 x 4 problems, every revision kept
    prompts = trainer.tokenizer.batch_decode(imitation.input_ids, skip_special_tokens=True)
    assert not any("Hint" in p for p in prompts)  # taught on the prompt without the hint
    # all unguided rewards are 0, so the RL advantages are 0: only imitation moves the policy,
    # and the last step's must have raised its replies' likelihood (nll logged before the step)
    assert all(records[step]["rgpo/imitation_nll"] > 0 for step in (1, 2, 3))
    last = seen[-1]
    with torch.no_grad():
        after, _ = micro_logprobs(trainer.model.eval(), last, torch.arange(len(last)), 1.0, None)
    mask = last.loss_mask[:, : after.shape[1]]
    assert float(-(after * mask).sum() / mask.sum()) < records[3]["rgpo/imitation_nll"]

    resumed = Trainer(rgpo_config(fast_overrides, "train.steps=4"), resume=trainer.run_dir.path)
    assert (
        resumed.methods.chosen["rgpo"].guidance.levels
        == trainer.methods.chosen["rgpo"].guidance.levels
    )


def test_rgpo_refuses_multi_turn_tasks_before_any_work(fast_overrides):
    with pytest.raises(ConfigError, match="methods.rgpo: task 'guess_number' is multi-turn"):
        build_components(rgpo_config(fast_overrides, "task.name=guess_number"))
