import pytest

from rlvr.train.metrics import batch_metrics
from rlvr.types import Problem, Trajectory


def trajectory(logprobs, reward=1.0, group=0):
    # Two prompt tokens (logprob 0, not in the loss mask), then the reply's tokens.
    return Trajectory(
        problem=Problem(id="p", prompt="?"), group_id=group, sample_index=0,
        token_ids=[1] * (2 + len(logprobs)), loss_mask=[0, 0] + [1] * len(logprobs),
        behaviour_logprobs=[0.0, 0.0, *logprobs], turn_rewards=[reward],
        turn_ends=[2 + len(logprobs)],
    )  # fmt: skip


def test_sequence_entropy_is_the_mean_sampled_reply_surprisal():
    metrics = batch_metrics([trajectory([-0.5, -1.5, -1.0]), trajectory([-2.0])])
    # (0.5 + 1.5 + 1.0) and 2.0 nats: a mean of 2.5 per reply, whatever the reply lengths.
    assert metrics["entropy/sequence"] == pytest.approx(2.5)
    assert metrics["response_length"] == pytest.approx(2.0)


def test_uniform_groups_are_the_share_of_groups_whose_replies_all_scored_alike():
    rewards = {0: [1.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 0.0], 3: [0.5, 0.0]}
    replies = [trajectory([-1.0], r, group) for group, rs in rewards.items() for r in rs]
    assert batch_metrics(replies)["uniform_groups"] == pytest.approx(2 / 4)
