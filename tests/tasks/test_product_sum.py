import pytest

from rlvr.models.tiny import build_tokenizer
from rlvr.rewards import REWARDS
from rlvr.rewards.base import as_reward_fn
from rlvr.rollout.parallel import counter_for, trace_stats
from rlvr.tasks.product_sum import ProductSumParams, ProductSumTask

TOKENIZER = build_tokenizer(ProductSumTask.added_tokens)


def task(**params):
    return ProductSumTask(ProductSumParams(**params), seed=0, eval_size=8)


def stats(text):
    return trace_stats(text, counter_for(TOKENIZER, text))


def test_the_answer_is_the_sum_of_the_products():
    for problem in task(terms=4, digits=2).eval_problems():
        factors = problem.metadata["factors"]
        assert problem.prompt == "+".join(f"{a}*{b}" for a, b in factors) + "="
        assert int(problem.answer) == sum(a * b for a, b in factors)
        assert len(factors) == 4 and all(10 <= a <= 99 and 2 <= b <= 9 for a, b in factors)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_demonstrations_are_right_and_flawed_ones_mostly_wrong(share):
    t = task(parallel_share=share)
    verify = as_reward_fn(REWARDS[t.verifier])
    problems = [t.train_problem(i) for i in range(40)]
    assert all(verify(p, t.demonstration(p)).value == 1.0 for p in problems)
    wrong = sum(verify(p, t.demonstration(p, flawed=True)).value == 0.0 for p in problems)
    assert wrong >= 30  # a dropped carry changes almost every answer


def test_a_parallel_demonstration_is_well_formed_and_has_the_shorter_critical_path():
    sequential, parallel = task(parallel_share=0.0), task(parallel_share=1.0)
    problem = sequential.train_problem(3)
    flat, threaded = (
        stats(sequential.demonstration(problem)),
        stats(parallel.demonstration(problem)),
    )
    assert flat.regions == 0 and flat.critical_path_tokens == flat.total_tokens
    assert threaded.well_formed and threaded.regions == 1 and threaded.subtask_ratio > 0.3
    assert threaded.critical_path_tokens < flat.critical_path_tokens < threaded.total_tokens


def test_the_parallel_share_sets_the_format_mix():
    t = task(parallel_share=0.5)
    regions = [stats(t.demonstration(t.train_problem(i))).regions for i in range(200)]
    assert 70 <= sum(regions) <= 130
