import copy

import torch

from rlvr.config import LoraSettings, load_config
from rlvr.methods.repexp import response_hidden_means
from rlvr.models.loading import load_model
from rlvr.models.lora import apply_lora, trainable_state_dict
from rlvr.rewards import REWARDS
from rlvr.train.reference import ReferencePolicy
from rlvr.train.trainer import Trainer
from rlvr.train.update import batch_logprobs
from rlvr.types import Batch, Problem, Score, Trajectory


def make_batch(pad_id: int) -> Batch:
    trajectories = [
        Trajectory(
            Problem(str(i), "x"),
            i,
            i,
            token_ids=[2, 10 + i, 20 + i, 21, 22, 30 + i][: 4 + i % 3],
            loss_mask=[0, 0, 1, 1, 1, 1][: 4 + i % 3],
            behaviour_logprobs=[0.0] * (4 + i % 3),
            turn_rewards=[1.0],
            turn_ends=[4 + i % 3],
        )
        for i in range(4)
    ]
    return Batch.from_trajectories(trajectories, pad_id)


def train_steps(model, batch: Batch, steps: int = 3) -> None:
    """A few optimizer steps that raise the batch's logprobs, in train mode as the trainer runs."""
    optimizer = torch.optim.AdamW(trainable_state_dict(model).values(), lr=1e-2)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        chosen = logits[:, :-1].log_softmax(-1).gather(-1, batch.input_ids[:, 1:, None])
        (-(chosen.squeeze(-1) * batch.loss_mask).sum()).backward()
        optimizer.step()


def test_full_fine_tuning_reference_is_a_frozen_copy(tiny_model, tokenizer):
    batch = make_batch(tokenizer.pad_token_id)
    policy = copy.deepcopy(tiny_model)
    reference = ReferencePolicy(policy)
    assert reference.model is not policy
    assert not any(p.requires_grad for p in reference.model.parameters())
    train_steps(policy, batch)
    expected = batch_logprobs(tiny_model, batch, 2, 1.0)
    assert torch.equal(reference.logprobs(batch, 2, 1.0), expected)
    assert not torch.allclose(batch_logprobs(policy, batch, 2, 1.0), expected, atol=1e-3)


def test_lora_reference_is_the_policy_with_its_adapters_off(tiny_model, tokenizer):
    batch = make_batch(tokenizer.pad_token_id)
    base = copy.deepcopy(tiny_model)
    policy = apply_lora(copy.deepcopy(tiny_model), LoraSettings(r=4, dropout=0.1))
    reference = ReferencePolicy(policy)
    assert reference.model is policy  # no second copy of the weights
    train_steps(policy, batch)  # the adapters move away from the identity
    assert policy.training
    policy_before = batch_logprobs(policy.eval(), batch, 2, 1.0)
    policy.train()

    ref = reference.logprobs(batch, 2, 1.0)
    assert policy.training  # left as it was found, adapters on
    assert (ref - batch_logprobs(base, batch, 2, 1.0)).abs().max() < 1e-6
    assert (ref - policy_before).abs().max() > 1e-2
    assert torch.equal(batch_logprobs(policy.eval(), batch, 2, 1.0), policy_before)


def test_reference_hidden_states_are_the_starting_policys(tiny_model, tokenizer):
    # RepExp's bonus reads the frozen start: a copy's, or a LoRA policy's with adapters off
    batch = make_batch(tokenizer.pad_token_id)
    expected = response_hidden_means(tiny_model, batch, 2)
    for policy in (
        copy.deepcopy(tiny_model),
        apply_lora(copy.deepcopy(tiny_model), LoraSettings(r=4)),
    ):
        reference = ReferencePolicy(policy)
        train_steps(policy, batch)
        with reference.frozen() as start:
            assert (response_hidden_means(start, batch, 2) - expected).abs().max() < 1e-5
        assert (response_hidden_means(policy.eval(), batch, 2) - expected).abs().max() > 1e-3


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")


def test_trainer_reference_of_a_lora_run_is_the_fresh_base(fast_overrides, tokenizer, monkeypatch):
    monkeypatch.setitem(REWARDS, "parity", parity)  # varies within groups: every step moves
    lora = ["model.lora.r=4", "train.lr=1e-2", "algo.kl_coef=0.1", "task.rewards={parity: 1.0}"]
    cfg = load_config(None, fast_overrides + ["train.steps=2", *lora])
    trainer = Trainer(cfg)
    trainer.run()
    assert trainer.reference.model is trainer.model
    fresh, _ = load_model(trainer.model.config.name_or_path)  # the warm-started tiny model
    batch = make_batch(tokenizer.pad_token_id)
    ref = trainer.reference.logprobs(batch, 2, 1.0)
    assert (ref - batch_logprobs(fresh, batch, 2, 1.0)).abs().max() < 1e-6
    policy = batch_logprobs(trainer.model, batch, 2, 1.0)
    assert (ref - policy).abs().max() > 1e-3
