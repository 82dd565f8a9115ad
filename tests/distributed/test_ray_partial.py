"""What a partial-rollout batch reports about the samples it took from other batches."""

import pytest

from rlvr.distributed.ray_partial import partial_metrics
from rlvr.types import Problem, Trajectory


def sample(admitted: int, generated: int, correct: bool) -> Trajectory:
    return Trajectory(
        problem=Problem("p", "1+1="), group_id=0, sample_index=0,
        token_ids=[1] * (3 + generated), loss_mask=[0] * 3 + [1] * generated,
        behaviour_logprobs=[0.0] * (3 + generated), turn_rewards=[float(correct)],
        turn_ends=[3 + generated], correct=correct,
        info={"admitted": [0, 0, admitted]},
    )  # fmt: skip


def test_samples_of_earlier_and_later_batches_are_counted_apart():
    batch = [
        sample(4, 30, False), sample(4, 26, True),  # carried over from step 4: the slow ones
        sample(5, 10, True), sample(5, 14, True), sample(5, 12, False),
        sample(6, 4, True),  # taken early from step 6: a quick one
    ]  # fmt: skip
    got = partial_metrics(batch, (0, 0, 5), {"unfinished": 3.0, "unfinished_tokens": 21.0})
    assert got["carried_share"] == pytest.approx(2 / 6)
    assert got["early_share"] == pytest.approx(1 / 6)
    assert got["length_carried"] == 28 and got["accuracy_carried"] == 0.5
    assert got["length_on_time"] == 12 and got["accuracy_on_time"] == pytest.approx(2 / 3)
    assert got["length_early"] == 4 and got["accuracy_early"] == 1.0
    assert got["unfinished"] == 3 and got["unfinished_length"] == 7


def test_a_batch_of_its_own_samples_reports_no_others():
    got = partial_metrics([sample(5, 8, True), sample(5, 6, False)], (0, 0, 5), {})
    assert got["carried_share"] == 0 and got["early_share"] == 0
    assert "length_carried" not in got and got["length_on_time"] == 7
    assert got["unfinished"] == 0 and got["unfinished_length"] == 0
