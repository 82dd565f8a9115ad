from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlvr.algos.losses import ppo_clip
from rlvr.config import LoraSettings, load_config
from rlvr.distributed.sharded import local_numel, shard_model
from rlvr.models.lora import apply_lora
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.train.data_parallel import DataParallel
from rlvr.train.update import Imitation, UpdateInputs, policy_update
from rlvr.types import Batch, Problem, Trajectory

OVERRIDES = [
    "algo.ppo_epochs=2",
    "rollout.batch_size=20",
    "rollout.group_size=4",
    "train.max_grad_norm=1.0",
]


def batch(tokenizer, size=20, shared=False):
    """`size` rows in groups of 4; `shared`: a group's rows share their prompt."""
    g = torch.Generator().manual_seed(1)
    trajectories = []
    for i in range(size):
        prompt_len, reply_len = 3 + (i // 4 if shared else i) % 4, 2 + (i * 7) % 9
        ids = torch.randint(7, len(tokenizer), (prompt_len + reply_len,), generator=g).tolist()
        if shared and i % 4:
            ids[:prompt_len] = trajectories[-1].token_ids[:prompt_len]
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


def policy(lora: bool):
    torch.manual_seed(0)
    # float64, so that the ranks' other summation order stays far below the tolerance even
    # after Adam divides tiny gradients by their own scale
    model = build_model("nano", build_tokenizer(), seed=0).double()
    if lora:  # a frozen base sharded beside the adapters that train
        model = apply_lora(model, LoraSettings(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    return model


def updated(case: tuple, distributed: bool) -> tuple[dict, dict]:
    """The tiny model's weights and metrics after one update, as one process or (`distributed`)
    as this rank of the default process group (whole weights, gathered from the shards when
    sharded)."""
    agg, sharded, shape, lora, extra = case
    model, tokenizer = policy(lora), build_tokenizer()
    total = local_numel(model)
    if distributed and sharded:
        shard_model(model)
    parallel = DataParallel.join(model, sharded) if distributed else DataParallel()
    cfg = load_config(None, [*OVERRIDES, *shape, f"algo.loss_agg={agg}"])
    data = batch(tokenizer, shared="shared" in extra)
    advantages = (data.rewards - data.rewards.mean())[:, None] * data.loss_mask
    imitation = Imitation(batch(tokenizer, 7), 0.5, "imitation_nll") if "imitate" in extra else None
    # Shared prompts run grouped one way on each rank and another in one process, and sharing
    # moves a gradient's last digits (a 1e-10 change of the weights, in one process as across
    # ranks); Adam's division by a near-zero gradient's own scale magnifies that past 1e-6
    if "shared" in extra:
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    result = policy_update(
        model, optimizer, scheduler, UpdateInputs(data, advantages, None, None, imitation=imitation),
        cfg, ppo_clip, None, torch.Generator().manual_seed(3), parallel,
    )  # fmt: skip
    whole = {
        k: (v.full_tensor() if parallel.sharded else v).detach().clone()
        for k, v in model.state_dict().items()
    }
    held = local_numel(model) / total
    return whole, dict(result.metrics, held=held, ddp=parallel.replica is not None)


def rank_main(rank: int, world_size: int, init_file: str, case: tuple, out: dict) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size)  # fmt: skip
    try:
        out[rank] = updated(case, distributed=True)
    finally:
        dist.destroy_process_group()


# minibatches of 10 rows: a rank's share of 5 splits into micro-batches of 2, 2, 1
HALVES = ("algo.minibatches=2", "train.micro_batch_size=2")
# minibatches of 5 rows: shares of 3 and 2 rows, so a sharded rank 1 makes up the count of
# micro-batches with an uncounted pass
UNEVEN = ("algo.minibatches=4", "train.micro_batch_size=1")


# minibatches of one row: rank 1's share is empty, so under DDP it joins each step's reduction
# with an uncounted pass
SINGLE_ROWS = ("algo.minibatches=20", "train.micro_batch_size=1")
# one minibatch, shares of 10 rows in micro-batches of 4, 4, 2: the last micro-batch, whose
# backward DDP reduces, shares its prompt in the second epoch (two forwards, one backward)
WHOLE = ("algo.minibatches=1", "train.micro_batch_size=4")


@pytest.mark.parametrize(
    ("agg", "sharded", "shape", "lora", "extra"),
    [
        ("token-mean", False, HALVES, False, ()),
        ("seq-mean-token-mean", False, HALVES, False, ()),
        ("seq-mean-token-mean", False, UNEVEN, False, ()),
        ("token-mean", False, SINGLE_ROWS, False, ()),
        ("token-mean", False, HALVES, True, ("imitate",)),
        ("token-mean", False, WHOLE, False, ("shared",)),
        ("token-mean", True, HALVES, False, ()),
        ("seq-mean-token-mean", True, UNEVEN, False, ()),
        ("token-mean", True, HALVES, True, ()),
    ],
    ids=[
        "ddp-token-mean",
        "ddp-seq-mean",
        "ddp-seq-mean-uneven",
        "ddp-empty-share",
        "ddp-lora-imitation",
        "ddp-shared-prompt",
        "fsdp2-token-mean",
        "fsdp2-seq-mean-uneven",
        "fsdp2-lora",
    ],  # fmt: skip
)
def test_two_gloo_ranks_with_half_batches_match_one_process(
    tmp_path, monkeypatch, agg, sharded, shape, lora, extra
):
    """Replicated ranks run DDP (its gradients summed, not averaged), sharded ones FSDP2; both
    take the optimizer steps one process takes on the whole batch, to 1e-6."""
    # spawned ranks unpickle rank_main by this module's name, found from the tests folder
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    torch.set_num_threads(1)
    case = (agg, sharded, shape, lora, extra)
    expected, expected_metrics = updated(case, distributed=False)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_main, args=(2, str(tmp_path / "init"), case, out), nprocs=2)
        results = dict(out)
    start = policy(lora).state_dict()
    assert any(not torch.equal(start[k], expected[k]) for k in expected)  # the update moved
    for rank in (0, 1):
        weights, metrics = results[rank]
        for name, value in expected.items():
            torch.testing.assert_close(weights[name], value, rtol=0, atol=1e-6, msg=name)
        names = (
            "loss",
            "grad_norm",
            "entropy",
            *(["imitation_nll"] if extra == ("imitate",) else []),
        )
        for name in names:
            assert metrics[name] == pytest.approx(expected_metrics[name], rel=1e-5, abs=1e-6), name
        # each FSDP rank holds about half the weights (a tensor's odd row goes to rank 0)
        assert metrics["held"] == (pytest.approx(0.5, abs=0.01) if sharded else 1.0)
        assert metrics["ddp"] is not sharded


def test_a_rank_share_can_be_empty_and_shares_cover_the_minibatch():
    minibatch = torch.tensor([5, 2, 7])
    shares = [DataParallel(r, 4).share(minibatch).tolist() for r in range(4)]
    assert shares == [[5], [2], [7], []]


def test_micro_batches_take_the_longest_rows_first_and_sharded_ranks_pad_to_one_count():
    minibatch = torch.tensor([5, 2, 7, 1, 9])  # shares [5, 2, 7] and [1, 9]
    lengths = torch.arange(10)  # row i is i tokens long
    plans = [
        [
            (rows.tolist(), counted)
            for rows, counted in DataParallel(r, 2, sharded).micro_batches(minibatch, 2, lengths)
        ]
        for sharded in (False, True)
        for r in range(2)
    ]
    assert plans[0] == [([7, 5], True), ([2], True)]
    assert plans[1] == [([9, 1], True)]  # replicated ranks need not match
    assert plans[2] == plans[0]
    assert plans[3] == [([9, 1], True), ([5], False)]
    # one row for two ranks: rank 1's share is empty, so it has nothing, or one uncounted pass
    alone = torch.tensor([3])
    assert list(DataParallel(1, 2).micro_batches(alone, 2, lengths)) == []
    ((rows, counted),) = DataParallel(1, 2, True).micro_batches(alone, 2, lengths)
    assert rows.tolist() == [3] and not counted
    # the same with shared prompts (units), as when the update skips all but one row
    units = torch.arange(10) // 2
    assert list(DataParallel(1, 2).micro_batches(alone, 2, lengths, units)) == []


def test_a_replicated_group_without_ddp_refuses_to_update():
    """Nothing would sum its gradients: each rank would step on its own share alone."""
    model = torch.nn.Linear(2, 2)
    assert DataParallel().computing(model) is model
    assert DataParallel(0, 2, sharded=True).computing(model) is model
    with pytest.raises(ValueError, match="DataParallel.join"):
        DataParallel(0, 2).computing(model)
