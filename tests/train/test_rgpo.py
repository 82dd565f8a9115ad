"""RGPO through the trainer: failed groups get hinted re-rollouts, the revisions that beat them are
imitated on the unhinted prompt, and the hint levels survive a checkpoint."""

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.rewards import REWARDS
from rlvr.train.setup import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.update import micro_logprobs
from rlvr.types import Score


def hint_seen(problem, response):
    """Right exactly when the prompt carries a hint: unguided rollouts always fail, revised ones
    always win, so every group is hinted and every revision is kept."""
    return Score(float("Hint:" in str(problem.prompt)), "ok")


def rgpo_config(fast_overrides, *extra):
    return load_config(None, fast_overrides + [
        "algo.rgpo_segments=2", "algo.rgpo_sft_coef=1.0", "train.lr=1e-3", "log.name=rgpo", *extra,
    ])  # fmt: skip


def test_failed_groups_are_hinted_and_their_revisions_imitated(fast_overrides, monkeypatch):
    monkeypatch.setitem(REWARDS, "numeric", hint_seen)  # the arithmetic task's verifier
    trainer = Trainer(rgpo_config(fast_overrides, "train.steps=3"))
    seen = []
    original = trainer.updater.update

    def spy(model, data, *args):
        seen.append(data.imitation)
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
    assert resumed.guidance.levels == trainer.guidance.levels


def test_rgpo_refuses_multi_turn_tasks_before_any_work(fast_overrides):
    with pytest.raises(ConfigError, match="rgpo_segments"):
        build_components(rgpo_config(fast_overrides, "task.name=guess_number"))
