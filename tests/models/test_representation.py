import pytest
import torch

from rlvr.models.representation import (
    backbone,
    response_hidden_means,
    sparse_projection,
    step_seed,
)
from rlvr.types import Batch, Problem, Trajectory


def batch_of(lengths: list[tuple[int, int]], pad_id: int) -> Batch:
    """Rows of `prompt` untrained tokens then `reply` policy tokens, right-padded."""
    trajectories = []
    for i, (prompt, reply) in enumerate(lengths):
        ids = [(7 * i + 3 * j) % 40 + 5 for j in range(prompt + reply)]
        mask = [0] * prompt + [1] * reply
        trajectories.append(
            Trajectory(Problem(str(i), "x"), i, 0, ids, mask, [0.0] * len(ids), [1.0], [len(ids)])
        )
    return Batch.from_trajectories(trajectories, pad_id)


def test_hidden_means_average_the_final_hidden_states_over_the_reply_alone(tiny_model, tokenizer):
    lengths = [(3, 4), (5, 1), (2, 7)]
    batch = batch_of(lengths, tokenizer.pad_token_id)
    means = response_hidden_means(tiny_model, batch, micro_batch_size=2)
    for row, (prompt, reply) in enumerate(lengths):
        ids = batch.input_ids[row : row + 1, : prompt + reply]  # alone, unpadded
        with torch.no_grad():
            hidden = tiny_model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0]
        expected = hidden[prompt:].mean(0)  # the reply's positions, after the final norm
        assert torch.allclose(means[row], expected, atol=1e-5)


def test_backbone_is_the_stack_under_the_head(tiny_model):
    assert backbone(tiny_model) is tiny_model.model
    with pytest.raises(ValueError, match="elliptical_beta=0"):
        backbone(torch.nn.Linear(2, 2))


def test_sparse_projection_is_seeded_sparse_and_nearly_keeps_distances():
    projection = sparse_projection(1024, 64, seed=3)
    assert projection.shape == (1024, 64)
    assert torch.equal(projection, sparse_projection(1024, 64, seed=3))
    assert not torch.equal(projection, sparse_projection(1024, 64, seed=4))
    assert (projection != 0).float().mean() == pytest.approx(1 / 32, rel=0.2)  # 1/sqrt(1024)
    points = torch.randn(20, 1024, generator=torch.Generator().manual_seed(0))
    ratio = torch.pdist(points @ projection) / torch.pdist(points)
    assert 0.6 < ratio.min() and ratio.max() < 1.4  # Johnson-Lindenstrauss at 64 dimensions


def test_step_seeds_differ_by_step_and_repeat_on_resume():
    assert step_seed(0, 5) == step_seed(0, 5)
    assert len({step_seed(0, s) for s in range(100)} | {step_seed(1, 0)}) == 101
