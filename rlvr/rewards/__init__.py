"""Rewards: verifiers that score a response against a Problem, and ways to combine them."""

from rlvr.rewards.answers import extract_answer
from rlvr.rewards.base import RewardFn, score_safely
from rlvr.rewards.code import CodeTests
from rlvr.rewards.combine import by_domain, gated, weighted
from rlvr.rewards.countdown import countdown_check
from rlvr.rewards.edit_distance import exact_reply, levenshtein
from rlvr.rewards.format import format_reward
from rlvr.rewards.ifeval import ifeval
from rlvr.rewards.judge import HFJudge
from rlvr.rewards.match import NumericMatch, exact_at, exact_match
from rlvr.rewards.math import MathEqual
from rlvr.rewards.optimization import OptReward
from rlvr.rewards.penalties import LengthPenalty, RepetitionPenalty
from rlvr.rewards.reasoning_gym import reasoning_gym_score
from rlvr.rewards.reward_model import RewardModel
from rlvr.rewards.solution import solution_prefix
from rlvr.rewards.spurious import RandomReward

__all__ = [
    "REWARDS",
    "RewardFn",
    "by_domain",
    "extract_answer",
    "gated",
    "score_safely",
    "weighted",
]

REWARDS: dict[str, RewardFn] = {
    "exact": exact_match,
    "exact_at": exact_at,
    "numeric": NumericMatch,
    "math": MathEqual,
    "countdown": countdown_check,
    "format": format_reward,
    "ifeval": ifeval,
    "code": CodeTests,
    "length": LengthPenalty,
    "repetition": RepetitionPenalty,
    "reward_model": RewardModel,
    "judge": HFJudge,
    "reasoning_gym": reasoning_gym_score,
    "exact_reply": exact_reply,
    "levenshtein": levenshtein,
    "solution_prefix": solution_prefix,
    "random": RandomReward,
    "miniopt": OptReward,
}
