import copy

import pytest
import torch

from rlvr.config import ConfigError, LoraSettings, load_config
from rlvr.models.lora import apply_lora
from rlvr.train.critic import Critic, clipped_value_loss
from rlvr.types import Batch, Problem, Trajectory


def test_clipped_value_loss_golden():
    old = torch.tensor([0.0, 0.0, 1.0])
    new = torch.tensor([0.5, 0.1, 0.0])
    ret = torch.tensor([1.0, 1.0, 1.0])
    # token 0: unclipped (0.5-1)^2=0.25, clipped V=0.2 -> (0.2-1)^2=0.64 -> max 0.64 -> 0.32
    # token 1: |0.1| inside the clip -> both 0.81 -> 0.405
    # token 2: unclipped (0-1)^2=1, clipped V=0.8 -> 0.04 -> max 1 -> 0.5
    expected = torch.tensor([0.32, 0.405, 0.5])
    loss, clipped = clipped_value_loss(new, old, ret, 0.2)
    assert torch.allclose(loss, expected, atol=1e-6)
    assert clipped.tolist() == [True, False, False]  # only token 0's clipped term is larger


def trajectories() -> list[Trajectory]:
    return [
        Trajectory(
            Problem(str(i), "x"),
            i,
            i,
            token_ids=[2, 10 + i, 20, 21, 22],
            loss_mask=[0, 0, 1, 1, 1],
            behaviour_logprobs=[0.0] * 5,
            turn_rewards=[float(i % 2)],
            turn_ends=[5],
        )
        for i in range(4)
    ]


def test_critic_fits_returns(tiny_model, tokenizer):
    cfg = load_config(None, ["algo.critic_lr=3e-3", "algo.ppo_epochs=4", "algo.value_clip=10"])
    critic = Critic(tiny_model, cfg)
    batch = Batch.from_trajectories(trajectories(), tokenizer.pad_token_id)
    returns = batch.rewards[:, None] * batch.loss_mask  # odd prompts are worth 1, even ones 0
    assert torch.equal(critic.values(batch), torch.zeros_like(returns))  # zero-initialised head
    for _ in range(15):
        critic.update(batch, returns, critic.values(batch), torch.Generator().manual_seed(0))
    error = ((critic.values(batch) - returns) * batch.loss_mask).abs().max()
    assert error < 0.2


def test_a_lora_policys_critic_trains_its_own_adapters_and_head(tiny_model, tokenizer):
    policy = apply_lora(copy.deepcopy(tiny_model), LoraSettings(r=4))
    policy_before = {k: v.clone() for k, v in policy.state_dict().items()}
    cfg = load_config(None, ["algo.critic_lr=3e-3", "algo.ppo_epochs=4", "algo.value_clip=10"])
    critic = Critic(policy, cfg)
    frozen = {k: v.clone() for k, v in critic.model.named_parameters() if not v.requires_grad}
    assert frozen and all("lora_" not in k for k in frozen)
    batch = Batch.from_trajectories(trajectories(), tokenizer.pad_token_id)
    returns = batch.rewards[:, None] * batch.loss_mask
    for _ in range(15):
        critic.update(batch, returns, critic.values(batch), torch.Generator().manual_seed(0))
    assert ((critic.values(batch) - returns) * batch.loss_mask).abs().max() < 0.2
    assert all(torch.equal(frozen[k], v) for k, v in critic.model.named_parameters() if k in frozen)
    assert all(torch.equal(policy_before[k], v) for k, v in policy.state_dict().items())

    state = critic.state_dict()  # only what trains: the frozen body comes from the policy
    assert set(state["model"]) == {k for k, v in critic.model.named_parameters() if v.requires_grad}
    other = Critic(policy, cfg)
    other.load_state_dict(state)
    assert torch.equal(other.values(batch), critic.values(batch))


def test_frozen_attention_critic_trains_only_the_rest(tiny_model, tokenizer):
    cfg = load_config(None, ["algo.critic_lr=3e-3", "algo.critic_freeze=[attn]"])
    critic = Critic(tiny_model, cfg)
    before = {k: v.detach().clone() for k, v in critic.model.named_parameters()}
    frozen = {k for k in before if "attn" in k}
    assert frozen and all(".self_attn." in k for k in frozen)
    batch = Batch.from_trajectories(trajectories(), tokenizer.pad_token_id)
    returns = batch.rewards[:, None] * batch.loss_mask
    for _ in range(2):  # the head starts at zero, so the body moves from the second step
        critic.update(batch, returns, critic.values(batch), torch.Generator().manual_seed(0))
    after = dict(critic.model.named_parameters())
    assert all(torch.equal(before[k], after[k]) for k in frozen)
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved == set(before) - frozen  # the MLPs, norms, embeddings and head all train
    optimized = {id(p) for group in critic.optimizer.param_groups for p in group["params"]}
    assert all(id(after[k]) not in optimized for k in frozen)


def test_critic_freeze_names_an_unknown_module(tiny_model):
    cfg = load_config(None, ["algo.critic_freeze=[mlp, cross_attn]"])
    with pytest.raises(ConfigError, match=r"critic_freeze: 'cross_attn'.*self_attn"):
        Critic(tiny_model, cfg)


@pytest.mark.parametrize("updates", [1, 2])
def test_critic_updates_run_that_many_passes(tiny_model, tokenizer, updates):
    cfg = load_config(None, [f"algo.critic_updates={updates}", "algo.minibatches=2"])
    critic = Critic(tiny_model, cfg)
    batch = Batch.from_trajectories(trajectories(), tokenizer.pad_token_id)
    returns = batch.rewards[:, None] * batch.loss_mask
    critic.update(batch, returns, critic.values(batch), torch.Generator().manual_seed(0))
    steps = {int(s["step"]) for s in critic.optimizer.state_dict()["state"].values()}
    assert steps == {2 * updates}  # minibatches x critic_updates optimizer steps


def test_value_loss_aggregation_follows_its_setting_and_logs_the_clip_share(tiny_model, tokenizer):
    batch = Batch.from_trajectories(trajectories(), tokenizer.pad_token_id)
    returns = batch.rewards[:, None] * batch.loss_mask  # V starts at 0: rows 1, 3 have error 1
    metrics = {}
    for agg in ("token-mean", "token-sum", "loss_agg"):
        overrides = [
            f"algo.value_loss_agg={agg}",
            "algo.value_clip=0.5",
            "train.micro_batch_size=2",
        ]
        cfg = load_config(None, [*overrides, "algo.loss_agg=seq-mean-token-sum"])
        critic = Critic(tiny_model, cfg)
        metrics[agg] = critic.update(batch, returns, critic.values(batch), torch.Generator())
    # 12 policy tokens, 6 of them with 0.5 * (0 - 1)^2: token-mean 0.25, token-sum 3, and
    # 'loss_agg' follows algo.loss_agg: each sequence's sum (1.5 or 0), mean over 4 rows = 0.75
    assert metrics["token-mean"]["critic/value_loss"] == pytest.approx(0.25, abs=1e-6)
    assert metrics["token-sum"]["critic/value_loss"] == pytest.approx(3.0, abs=1e-6)
    assert metrics["loss_agg"]["critic/value_loss"] == pytest.approx(0.75, abs=1e-6)
    # V = V_old = 0: the clipped and unclipped terms are equal, so the clip never binds
    assert metrics["token-mean"]["critic/vf_clip_frac"] == 0.0


def test_vf_clip_frac_counts_the_tokens_where_the_clipped_term_is_larger(tiny_model, tokenizer):
    batch = Batch.from_trajectories(trajectories(), tokenizer.pad_token_id)
    returns = batch.rewards[:, None] * batch.loss_mask
    cfg = load_config(None, ["algo.value_clip=0.1"])
    critic = Critic(tiny_model, cfg)
    # old values 1 on every policy token: V = 0 is clipped to 0.9, further from a return of 0
    # (rows 0, 2) and nearer to a return of 1 (rows 1, 3): the clip binds on half the tokens
    old = batch.loss_mask.clone()
    metrics = critic.update(batch, returns, old, torch.Generator())
    assert metrics["critic/vf_clip_frac"] == pytest.approx(0.5)


def test_an_unknown_value_loss_aggregation_is_refused(tiny_model):
    with pytest.raises(ConfigError, match="algo.value_loss_agg"):
        Critic(tiny_model, load_config(None, ["algo.value_loss_agg=token-mena"]))
