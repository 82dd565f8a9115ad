import copy

import torch

from rlvr.algos.losses import ppo_clip
from rlvr.config import load_config
from rlvr.train.update import UpdateInputs, policy_update
from rlvr.types import Batch, Problem, Trajectory


def random_batch(tokenizer, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    trajectories = []
    for i in range(size):
        prompt_len, reply_len = 4 + i % 3, 3 + (i * 5) % 7
        ids = torch.randint(7, len(tokenizer), (prompt_len + reply_len,), generator=g).tolist()
        trajectories.append(
            Trajectory(
                Problem(str(i), "x"),
                group_id=i // 4,
                sample_index=i,
                token_ids=ids,
                loss_mask=[0] * prompt_len + [1] * reply_len,
                behaviour_logprobs=[0.0] * len(ids),
                turn_rewards=[float(i % 2)],
                turn_ends=[len(ids)],
            )
        )
    return Batch.from_trajectories(trajectories, tokenizer.pad_token_id)


def run_update(model, tokenizer, micro_batch_size, epochs=2, minibatches=2):
    cfg = load_config(
        None,
        [
            f"train.micro_batch_size={micro_batch_size}",
            f"algo.ppo_epochs={epochs}",
            f"algo.minibatches={minibatches}",
            "rollout.batch_size=8",
            "rollout.group_size=4",
        ],
    )
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    batch = random_batch(tokenizer)
    advantages = (batch.rewards - 0.5)[:, None] * batch.loss_mask
    with torch.no_grad():
        from rlvr.train.update import batch_logprobs

        old = batch_logprobs(model, batch, 8, 1.0)
    data = UpdateInputs(batch, advantages, old, None)
    result = policy_update(
        model, optimizer, scheduler, data, cfg, ppo_clip, None, torch.Generator().manual_seed(0)
    )
    return model, result


def test_micro_batching_does_not_change_the_update(tiny_model, tokenizer):
    whole, r1 = run_update(tiny_model, tokenizer, micro_batch_size=4)
    split, r2 = run_update(tiny_model, tokenizer, micro_batch_size=1)
    assert abs(r1.metrics["loss"] - r2.metrics["loss"]) < 1e-6
    for a, b in zip(whole.parameters(), split.parameters()):
        assert torch.allclose(a, b, atol=1e-5)  # Adam amplifies float32 summation-order noise
    moved = max((a - b).abs().max() for a, b in zip(whole.parameters(), tiny_model.parameters()))
    assert moved > 1e-4


def test_update_raises_the_logprob_of_positive_advantage_replies(tiny_model, tokenizer):
    from rlvr.train.update import batch_logprobs

    batch = random_batch(tokenizer)
    before = batch_logprobs(tiny_model, batch, 8, 1.0)
    model, _ = run_update(tiny_model, tokenizer, micro_batch_size=8, epochs=1, minibatches=1)
    after = batch_logprobs(model, batch, 8, 1.0)
    per_seq = ((after - before) * batch.loss_mask).sum(-1)
    assert per_seq[batch.rewards == 1].mean() > 0 > per_seq[batch.rewards == 0].mean()


def test_entropy_bonus_raises_entropy(tiny_model, tokenizer):
    from rlvr.train.update import batch_logprobs, micro_logprobs

    batch = random_batch(tokenizer)
    zero_adv = torch.zeros_like(batch.loss_mask)

    def entropy_after(coef):
        cfg = load_config(
            None, [f"algo.entropy_coef={coef}", "rollout.batch_size=8", "rollout.group_size=4"]
        )
        model = copy.deepcopy(tiny_model).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        old = batch_logprobs(model, batch, 8, 1.0)
        data = UpdateInputs(batch, zero_adv, old, None)
        policy_update(model, optimizer, scheduler, data, cfg, ppo_clip, None, torch.Generator())
        with torch.no_grad():
            _, entropy = micro_logprobs(model, batch, torch.arange(8), 1.0, with_entropy=True)
        return float((entropy * batch.loss_mask).sum())

    assert entropy_after(0.0) == entropy_after(0.0)
    assert entropy_after(1.0) > entropy_after(0.0) + 1e-4


def test_micro_batch_1x8_equals_8x1_over_20_steps(fast_overrides, monkeypatch):
    """The whole loop, 20 RL steps: accumulation of 8 micro-batches of 1 vs one of 8."""
    from rlvr.rewards import REWARDS
    from rlvr.train.trainer import Trainer
    from rlvr.types import Score

    monkeypatch.setitem(REWARDS, "parity", lambda p, r: Score(float(len(r) % 2), "ok"))
    common = fast_overrides + [
        "rollout.batch_size=8", "train.steps=20", "train.eval_every=0", "train.save_every=0",
        "task.rewards={parity: 1.0}", "train.lr=1e-3",
    ]  # fmt: skip
    losses = {}
    for micro in (1, 8):
        trainer = Trainer(
            load_config(None, common + [f"train.micro_batch_size={micro}", f"log.name=m{micro}"])
        )
        trainer.run()
        losses[micro] = [r["loss"] for r in trainer.run_dir.read_metrics() if "loss" in r]
    assert len(losses[1]) == len(losses[8]) == 20
    assert max(abs(a - b) for a, b in zip(losses[1], losses[8])) < 1e-5
    assert len({round(x, 6) for x in losses[8]}) > 1  # the loss really changes from step to step
