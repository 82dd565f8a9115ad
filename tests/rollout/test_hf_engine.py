import math

import pytest
import torch

from rlvr.models.logprobs import token_logprobs
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.hf_engine import sampling_logprobs
from rlvr.rollout.tokens import encode_prompt


def prompts_for(tokenizer, texts):
    return [encode_prompt(tokenizer, [{"role": "user", "content": t}]) for t in texts]


def teacher_forced(model, prompt, completion, temperature):
    ids = torch.tensor([prompt + completion])
    logprobs, _ = token_logprobs(model, ids, torch.ones_like(ids), temperature)
    return logprobs[0, len(prompt) - 1 :]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_equal_teacher_forced_forward(tiny_model, tokenizer, temperature):
    engine = HFEngine(tiny_model, tokenizer)
    prompts = prompts_for(
        tokenizer, ["1+2=", "345+678=", "9*9="]
    )  # different lengths: left padding
    completions = engine.generate(prompts, SamplingParams(16, temperature), seeds=[1, 2, 3])
    for prompt, completion in zip(prompts, completions):
        expected = teacher_forced(tiny_model, prompt, completion.token_ids, temperature)
        got = torch.tensor(completion.logprobs)
        assert torch.allclose(got, expected.detach(), atol=1e-5), (got - expected).abs().max()


def test_sample_depends_only_on_its_seed(tiny_model, tokenizer):
    engine = HFEngine(tiny_model, tokenizer)
    prompts = prompts_for(tokenizer, ["12+34=", "5+6=", "777+888="])
    params = SamplingParams(20, 1.0)
    together = engine.generate(prompts, params, seeds=[10, 11, 12])
    alone = engine.generate(prompts[1:2], params, seeds=[11])
    assert together[1].token_ids == alone[0].token_ids
    other_seed = engine.generate(prompts[1:2], params, seeds=[99])
    assert other_seed[0].token_ids != alone[0].token_ids


def test_greedy_takes_the_argmax(tiny_model, tokenizer):
    engine = HFEngine(tiny_model, tokenizer)
    prompt = prompts_for(tokenizer, ["3+4="])[0]
    completion = engine.generate([prompt], SamplingParams(12, temperature=0.0))[0]
    ids = torch.tensor([prompt + completion.token_ids])
    logits = tiny_model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    assert completion.token_ids == logits.argmax(-1).tolist()


def test_budget_eos_and_stop_strings(tiny_model, tokenizer):
    engine = HFEngine(tiny_model, tokenizer)
    prompt = prompts_for(tokenizer, ["hello"])[0]
    completion = engine.generate([prompt], SamplingParams(7, 1.0), seeds=[0])[0]
    assert len(completion.token_ids) <= 7
    if completion.finish_reason == "length":
        assert len(completion.token_ids) == 7
    # every printable character is a stop string: the first non-special token must stop it
    stops = tuple(chr(c) for c in range(32, 127))
    stopped = engine.generate([prompt], SamplingParams(30, 1.0, stop=stops), seeds=[0])[0]
    assert stopped.finish_reason in ("stop", "eos")
    text = tokenizer.decode(stopped.token_ids)
    assert sum(ch in stops for ch in text) <= 1


def test_sampling_logprobs_top_p_and_top_k():
    probs = torch.tensor([[0.5, 0.3, 0.2]])
    logits = probs.log()
    nucleus = sampling_logprobs(logits, 1.0, 0, 0.7).exp()
    assert torch.allclose(nucleus, torch.tensor([[0.625, 0.375, 0.0]]), atol=1e-6)
    top1 = sampling_logprobs(logits, 1.0, 1, 1.0).exp()
    assert torch.allclose(top1, torch.tensor([[1.0, 0.0, 0.0]]))
    hot = sampling_logprobs(logits, 2.0, 0, 1.0).exp()
    expected = probs.sqrt() / probs.sqrt().sum()
    assert torch.allclose(hot, expected, atol=1e-6)


def test_sampling_matches_the_distribution(tiny_model, tokenizer):
    """First-token frequencies over many seeds follow the engine's own logprobs."""
    engine = HFEngine(tiny_model, tokenizer)
    prompt = prompts_for(tokenizer, ["x"])[0]
    n = 400
    completions = engine.generate(
        [prompt] * n, SamplingParams(1, 1.0, top_k=3), seeds=list(range(n))
    )
    counts: dict[int, int] = {}
    logprob_of: dict[int, float] = {}
    for c in completions:
        counts[c.token_ids[0]] = counts.get(c.token_ids[0], 0) + 1
        logprob_of[c.token_ids[0]] = c.logprobs[0]
    assert len(counts) <= 3
    for token, count in counts.items():
        p = math.exp(logprob_of[token])
        assert abs(count / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 0.01


def test_large_calls_are_split_without_changing_samples(tiny_model, tokenizer):
    prompts = prompts_for(tokenizer, ["1+1=", "22+22=", "333+333=", "4*4=", "5-5="])
    params = SamplingParams(10, 1.0)
    whole = HFEngine(tiny_model, tokenizer).generate(prompts, params, seeds=list(range(5)))
    split = HFEngine(tiny_model, tokenizer, max_batch_size=2).generate(
        prompts, params, seeds=list(range(5))
    )
    assert [c.token_ids for c in whole] == [c.token_ids for c in split]


def test_a_group_shares_one_prefill_and_finished_rows_leave_the_batch(tiny_model, tokenizer):
    """Four samples of one prompt and two of others: the prefill runs on the three distinct
    prompts, the decode batch shrinks as rows finish, and every sample is what it is alone."""
    texts = ["12+34=", "12+34=", "5+6=", "12+34=", "777+888=", "12+34="]
    prompts = prompts_for(tokenizer, texts)
    # any digit stops a reply, so the untrained model's replies end at different lengths
    params, seeds = SamplingParams(24, 1.0, stop=list("0123456789")), [3, 1, 4, 1, 5, 9]
    rows_per_forward = []
    hook = tiny_model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_forward.append(len(kwargs["input_ids"])),
        with_kwargs=True,
    )
    try:
        together = HFEngine(tiny_model, tokenizer).generate(prompts, params, seeds)
    finally:
        hook.remove()
    assert rows_per_forward[0] == 3  # one prefill row per distinct prompt
    # the call that feeds token k holds exactly the rows longer than k
    longest = max(len(c.token_ids) for c in together)
    alive = [sum(len(c.token_ids) > k for c in together) for k in range(1, longest)]
    assert rows_per_forward[1:] == alive and alive[-1] < len(prompts)
    engine = HFEngine(tiny_model, tokenizer)
    for prompt, seed, got in zip(prompts, seeds, together):
        (alone,) = engine.generate([prompt], params, [seed])
        assert got.token_ids == alone.token_ids and got.finish_reason == alone.finish_reason
        assert got.logprobs == pytest.approx(alone.logprobs, abs=1e-6)
    assert together[0].token_ids != together[3].token_ids  # one prompt, two seeds: two answers
