from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlvr.algos.losses import ppo_clip
from rlvr.config import load_config
from rlvr.distributed.data_parallel import DataParallel
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.train.update import UpdateInputs, policy_update
from rlvr.types import Batch, Problem, Trajectory

OVERRIDES = [
    "train.micro_batch_size=2",  # a rank's share of 5 rows splits 2, 2, 1
    "algo.ppo_epochs=2",
    "algo.minibatches=2",
    "rollout.batch_size=20",
    "rollout.group_size=4",
    "train.max_grad_norm=1.0",
]


def batch(tokenizer, size=20):
    g = torch.Generator().manual_seed(1)
    trajectories = []
    for i in range(size):
        prompt_len, reply_len = 3 + i % 4, 2 + (i * 7) % 9
        ids = torch.randint(7, len(tokenizer), (prompt_len + reply_len,), generator=g).tolist()
        trajectories.append(
            Trajectory(
                Problem(str(i), "x"),
                group_id=i // 4,
                sample_index=i,
                token_ids=ids,
                loss_mask=[0] * prompt_len + [1] * reply_len,
                behaviour_logprobs=[-1.0] * len(ids),
                turn_rewards=[float(i % 3 == 0)],
                turn_ends=[len(ids)],
            )  # fmt: skip
        )
    return Batch.from_trajectories(trajectories, tokenizer.pad_token_id)


def updated(parallel: DataParallel, agg: str) -> tuple[dict, dict]:
    """The tiny model's weights and metrics after one update as `parallel`'s rank."""
    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    # float64, so that the ranks' other summation order stays far below the tolerance even
    # after Adam divides tiny gradients by their own scale
    model = build_model("nano", tokenizer, seed=0).double()
    cfg = load_config(None, [*OVERRIDES, f"algo.loss_agg={agg}"])
    data = batch(tokenizer)
    advantages = (data.rewards - data.rewards.mean())[:, None] * data.loss_mask
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    result = policy_update(
        model, optimizer, scheduler, UpdateInputs(data, advantages, None, None), cfg, ppo_clip,
        None, torch.Generator().manual_seed(3), parallel,
    )  # fmt: skip
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, result.metrics


def rank_main(rank: int, world_size: int, init_file: str, agg: str, out: dict) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size)  # fmt: skip
    try:
        weights, metrics = updated(DataParallel(rank, world_size), agg)
        out[rank] = (weights, metrics)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_two_gloo_ranks_with_half_batches_match_one_process(tmp_path, monkeypatch, agg):
    # spawned ranks unpickle rank_main by this module's name, found from the tests folder
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    torch.set_num_threads(1)
    expected, expected_metrics = updated(DataParallel(), agg)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_main, args=(2, str(tmp_path / "init"), agg, out), nprocs=2)
        results = dict(out)
    start = build_model("nano", build_tokenizer(), seed=0).double().state_dict()
    assert any(not torch.equal(start[k], expected[k]) for k in expected)  # the update moved
    for rank in (0, 1):
        weights, metrics = results[rank]
        for name, value in expected.items():
            torch.testing.assert_close(weights[name], value, rtol=0, atol=1e-6, msg=name)
        for name in ("loss", "grad_norm", "entropy"):
            assert metrics[name] == pytest.approx(expected_metrics[name], rel=1e-5, abs=1e-6), name


def test_a_rank_share_can_be_empty_and_shares_cover_the_minibatch():
    minibatch = torch.tensor([5, 2, 7])
    shares = [DataParallel(r, 4).share(minibatch).tolist() for r in range(4)]
    assert shares == [[5], [2], [7], []]
