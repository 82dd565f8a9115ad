import copy

import pytest
import torch

from rlvr.algos.losses import ppo_clip
from rlvr.config import LoraSettings, load_config
from rlvr.models.logprobs import LogNormaliser, token_logprobs
from rlvr.models.lora import apply_lora
from rlvr.models.shared_prefix import Prompts, find_prompts, to_columns, worth_sharing
from rlvr.train.update import UpdateInputs, batch_logprobs, policy_update
from rlvr.types import Batch, Problem, Trajectory


def grouped_batch(tokenizer, seed=0):
    """3 prompts of different lengths x 3 samples of different lengths; the last row of each
    group is two turns, with an observation the policy did not write between its replies."""
    g = torch.Generator().manual_seed(seed)
    vocab = len(tokenizer)
    trajectories = []
    for group, prompt_len in enumerate([5, 9, 3]):
        prompt = torch.randint(7, vocab, (prompt_len,), generator=g).tolist()
        for sample in range(3):
            reply = torch.randint(7, vocab, (2 + 3 * sample + group,), generator=g).tolist()
            mask = [0] * prompt_len + [1] * len(reply)
            if sample == 2:
                observation = torch.randint(7, vocab, (4,), generator=g).tolist()
                reply, mask = reply + observation + reply[:3], mask + [0] * 4 + [1] * 3
            trajectories.append(
                Trajectory(
                    Problem(str(group), "x"),
                    group_id=group,
                    sample_index=3 * group + sample,
                    token_ids=prompt + reply,
                    loss_mask=mask,
                    behaviour_logprobs=[0.0] * len(mask),
                    turn_rewards=[float(sample % 2)],
                    turn_ends=[len(mask)],
                )
            )
    return Batch.from_trajectories(trajectories, tokenizer.pad_token_id)


@pytest.fixture(scope="module")
def model64(tiny_model):
    return copy.deepcopy(tiny_model).double()


def test_prompts_are_the_tokens_before_the_first_policy_input(tokenizer):
    batch = grouped_batch(tokenizer)
    prompts = find_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask)
    # the last prompt token is the input of the first policy target, so it is not shared
    assert prompts.length.tolist() == [4] * 3 + [8] * 3 + [2] * 3
    assert prompts.unit.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # a different reply start (here: one more prompt token) is a different prompt
    batch.loss_mask[1, 4] = 0
    assert find_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask).unit.tolist() == [
        0, 1, 0, 2, 2, 2, 3, 3, 3,
    ]  # fmt: skip


def test_to_columns_places_suffix_values_and_zeros_the_rest():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    placed = to_columns(values, torch.tensor([1, 3]), torch.tensor([3, 2]), 6)
    assert placed.tolist() == [[0, 1, 2, 3, 0, 0], [0, 0, 0, 4, 5, 0]]
    placed.sum().backward()
    assert values.grad.tolist() == [[1, 1, 1], [1, 1, 0]]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_shared_prompt_logprobs_entropy_and_gradients_equal_the_plain_forward(
    tokenizer, model64, lora
):
    model = (
        apply_lora(copy.deepcopy(model64), LoraSettings(r=4)) if lora else copy.deepcopy(model64)
    )
    model.train()
    batch = grouped_batch(tokenizer)
    prompts = find_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask)
    mask = batch.loss_mask.double()
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3)).double()

    def run(shared):
        model.zero_grad()
        squares = torch.zeros(mask.shape, dtype=torch.float64)
        lse = LogNormaliser()
        chosen, entropy = token_logprobs(
            model, batch.input_ids, batch.attention_mask, 0.7, with_entropy=True,
            entropy_grad=True, sum_pi_squared=squares, prompts=prompts if shared else None,
            normaliser=lse,
        )  # fmt: skip
        ((chosen * weights + 0.3 * entropy - 0.2 * lse.values) * mask).sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        return chosen * mask, entropy * mask, squares * mask, lse.values * mask, grads

    plain, shared = run(False), run(True)
    for want, got in zip(plain[:4], shared[:4]):
        assert want.abs().sum() > 0.1
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    # HF's RMSNorm runs in float32 even in a float64 model, and sharing sums the rows' prompt
    # gradients in another order: equal to float32 rounding of each parameter's largest entry
    assert max(g.abs().max() for g in plain[4]) > 1e-3
    for want, got in zip(plain[4], shared[4]):
        assert (got - want).abs().max() <= 1e-6 * want.abs().max()


def test_sharing_is_skipped_when_no_prompt_has_two_rows(tokenizer):
    batch = grouped_batch(tokenizer)
    prompts = find_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask)
    assert worth_sharing(prompts, torch.tensor([0, 1, 5]))
    assert not worth_sharing(prompts, torch.tensor([0, 3, 6]))
    empty = Prompts(prompts.unit, torch.zeros_like(prompts.length))
    assert not worth_sharing(empty, torch.tensor([0, 1]))


def test_the_update_and_old_logprob_pass_are_the_same_with_and_without_sharing(tokenizer, model64):
    batch = grouped_batch(tokenizer)
    advantages = torch.randn(batch.loss_mask.shape, generator=torch.Generator().manual_seed(1))
    after = {}
    for share in (False, True):
        cfg = load_config(
            None,
            [
                f"train.share_prompt={str(share).lower()}",
                "train.micro_batch_size=3",
                "algo.ppo_epochs=2",
                "rollout.batch_size=9",
                "rollout.group_size=3",
            ],
        )
        model = copy.deepcopy(model64).train()
        old = batch_logprobs(model, batch, 3, 1.0, share_prompt=share)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        data = UpdateInputs(batch, advantages.double(), old.double(), None)
        result = policy_update(
            model, optimizer, scheduler, data, cfg, ppo_clip, None, torch.Generator()
        )
        after[share] = (old * batch.loss_mask, result.metrics, list(model.parameters()))
    torch.testing.assert_close(after[True][0], after[False][0], rtol=0, atol=1e-10)
    for name, value in after[False][1].items():
        assert after[True][1][name] == pytest.approx(value, rel=1e-6, abs=1e-9), name
    moved = max((p - q).abs().max() for p, q in zip(after[False][2], model64.parameters()))
    assert moved > 1e-3
    for shared, plain in zip(after[True][2], after[False][2]):
        torch.testing.assert_close(shared, plain, rtol=0, atol=1e-9)


def test_a_model_that_returns_no_cache_is_refused_with_the_fix(tokenizer, tiny_model):
    class NoCache(torch.nn.Module):
        device = torch.device("cpu")

        def forward(self, input_ids, attention_mask, cache=None, **_):
            logits = tiny_model(input_ids=input_ids, attention_mask=attention_mask).logits
            return type("Out", (), {"logits": logits, "cache": None})()

    batch = grouped_batch(tokenizer)
    prompts = find_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask)
    with pytest.raises(RuntimeError, match="train.share_prompt=false"):
        token_logprobs(NoCache(), batch.input_ids, batch.attention_mask, prompts=prompts)
