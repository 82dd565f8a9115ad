import copy

import torch

from rlvr.config import LoraSettings, load_config
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
    assert torch.allclose(clipped_value_loss(new, old, ret, 0.2), expected, atol=1e-6)


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
