import math

import pytest
import torch

from rlvr.analysis.entropy import entropy_summary, reply_entropy
from rlvr.models.tiny import build_model
from rlvr.types import Problem, Trajectory


def test_summary_by_hand():
    entropy = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    summary = entropy_summary(entropy, mask)
    assert summary["entropy/token"] == pytest.approx((1 + 2 + 3) / 3)
    assert summary["entropy/sequence"] == pytest.approx(((1 + 2) + 3) / 2)


def trajectory(prompt_ids, reply_ids):
    ids = prompt_ids + reply_ids
    mask = [0] * len(prompt_ids) + [1] * len(reply_ids)
    return Trajectory(
        problem=Problem(id="p", prompt="?"), group_id=0, sample_index=0, token_ids=ids,
        loss_mask=mask, behaviour_logprobs=[0.0] * len(ids), turn_rewards=[0.0],
        turn_ends=[len(ids)],
    )  # fmt: skip


def test_uniform_model_has_log_vocab_per_token(tokenizer):
    model = build_model("nano", tokenizer, seed=0)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied: every logit is 0, every distribution uniform
    trajectories = [trajectory([2, 10, 11], [12, 13, 3]), trajectory([2, 10], [14, 3])]
    summary = reply_entropy(model, trajectories, tokenizer.pad_token_id)
    log_vocab = math.log(model.config.vocab_size)
    assert summary["entropy/token"] == pytest.approx(log_vocab, rel=1e-5)
    assert summary["entropy/sequence"] == pytest.approx(log_vocab * (3 + 2) / 2, rel=1e-5)
