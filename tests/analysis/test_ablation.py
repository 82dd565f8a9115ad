"""Mean ablation on the nano Llama, checked by hand: a layer's mean contribution is the mean of
its output minus its input over the reference tokens; ablating a layer whose contribution is
constant changes nothing; ablating one that matters puts exactly input + mean in its place and
changes the logits and the greedy answers it was scored on."""

import pytest
import torch
from transformers import LlamaForCausalLM

from rlvr.analysis.ablation import ablation_drops, mean_ablated, mean_contributions
from rlvr.config import ConfigError
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.models.tiny import build_config
from rlvr.rewards.edit_distance import exact_reply
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.runner import EpisodeRunner
from rlvr.types import Problem


@pytest.fixture(scope="module")
def model(tokenizer):
    """Nano Llama whose second decoder layer adds the same vector c at every position (its
    attention output is o_proj's bias alone, zero weight, and its MLP writes nothing), and whose
    first writes 20 times louder than at initialisation, so that the greedy replies need it."""
    config = build_config("nano", tokenizer)
    config.attention_bias = True  # gives o_proj a bias to hold the constant
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    first, constant = model.model.layers[0], model.model.layers[1]
    with torch.no_grad():
        first.self_attn.o_proj.weight.mul_(20)
        first.mlp.down_proj.weight.mul_(20)
        constant.self_attn.o_proj.weight.zero_()
        constant.self_attn.o_proj.bias.copy_(torch.linspace(-1, 1, config.hidden_size))
        constant.mlp.down_proj.weight.zero_()
    return model


def rows(tokenizer, texts):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    return batch["input_ids"], batch["attention_mask"]


def layer_input(model, index, ids, mask) -> torch.Tensor:
    """The hidden state decoder layer `index` receives in a forward of the rows."""
    seen = []
    hook = lambda module, args, kwargs: seen.append(args[0] if args else kwargs["hidden_states"])  # noqa: E731
    handle = model.model.layers[index].register_forward_pre_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    handle.remove()
    return seen[0]


def test_mean_contribution_by_hand(model, tokenizer):
    ids, mask = rows(tokenizer, ["12+34=", "5+6789=", "0"])
    means = mean_contributions(model, ids, mask)
    assert len(means) == 4
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    on = mask[..., None].float()
    for layer in range(3):  # hidden_states[4] is after the final norm, not layer 3's output
        by_hand = ((hidden[layer + 1] - hidden[layer]) * on).sum((0, 1)) / mask.sum()
        assert torch.allclose(means[layer], by_hand, atol=1e-5)
    bias = model.model.layers[1].self_attn.o_proj.bias
    assert torch.allclose(means[1], bias, atol=1e-6)  # the constant layer's mean is its constant


def test_ablating_a_constant_layer_changes_nothing_and_a_working_one_does(model, tokenizer):
    ref_ids, ref_mask = rows(tokenizer, ["12+34=46", "999+1=1000", "7-3=4"])
    means = mean_contributions(model, ref_ids, ref_mask)
    ids, mask = rows(tokenizer, ["321+9=", "40-8="])

    def forward():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits

    plain = forward()
    with mean_ablated(model, 1, means[1]):
        assert torch.allclose(forward(), plain, atol=1e-5)
    with mean_ablated(model, 0, means[0]):
        ablated = forward()
        # layer 1 now receives layer 0's input (the embeddings) plus the reference mean
        embeddings = model.model.embed_tokens(ids)
        assert torch.allclose(layer_input(model, 1, ids, mask), embeddings + means[0], atol=1e-6)
    assert (ablated - plain).abs().max() > 0.3
    assert torch.equal(forward(), plain)  # the hook is gone on leaving


def test_accuracy_drops_by_layer(model, tokenizer):
    """Problems whose reference is the model's own greedy reply: greedy accuracy 1 unablated,
    unchanged without the constant layer, lower without layer 0 (answers checked by hand)."""
    engine = HFEngine(model, tokenizer)
    runner = EpisodeRunner(engine, tokenizer, lambda: SingleTurnEnv(exact_reply, exact_reply),
                           SamplingParams(6, 1.0))  # fmt: skip
    prompts = [Problem(f"p{i}", f"{i}+{i}=") for i in range(8)]
    greedy = runner.collect(prompts, 1, (0,), SamplingParams(6, 0.0))
    problems = [Problem(p.id, p.prompt, t.response_text) for p, t in zip(prompts, greedy)]
    reference = runner.collect(problems, 2, (0, 1))
    found = ablation_drops(model, runner, problems, reference, tokenizer.pad_token_id, (0, 2))
    assert found["ablation/greedy"] == 1.0
    assert found["ablation/layer_2"] == 0.0  # the constant layer (layer 2 counts the embeddings)
    batch_ids = [t.token_ids for t in reference]
    width = max(map(len, batch_ids))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in batch_ids])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in batch_ids])
    means = mean_contributions(model, ids, mask)
    with mean_ablated(model, 0, means[0]):
        replies = runner.collect(problems, 1, (0,), SamplingParams(6, 0.0))
    right = sum(t.response_text == p.answer for t, p in zip(replies, problems)) / len(problems)
    assert right < 1.0
    assert found["ablation/layer_1"] == pytest.approx(1.0 - right)
    with pytest.raises(ConfigError, match="rollout.engine=hf"):
        ablation_drops(LlamaForCausalLM(model.config), runner, problems, reference, 0, (0,))
