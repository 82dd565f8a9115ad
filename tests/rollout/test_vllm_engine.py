"""The vLLM engine against the real vllm (CPU build here): logprobs, seeds, stops, weight sync."""

import copy
import importlib.util
import threading
from pathlib import Path

import pytest
import torch

from rlvr.config import LoraSettings, VLLMSettings
from rlvr.models.logprobs import token_logprobs
from rlvr.models.lora import apply_lora
from rlvr.models.tiny import build_model
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine, eos_ids, sampling_logprobs
from rlvr.rollout.vllm_engine import VLLMEngine, WeightSyncError

# each test skips (rather than the module) so that its vllm mark shows on its report, where
# --strict-skips allows it
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed: scripts/vllm_cpu_tests.sh sets it up and runs these",
    ),
]

# Engine and trainer compute the same float32 math with different kernels.
LOGPROB_TOL = 1e-4


@pytest.fixture(scope="module")
def policy(tokenizer):
    return build_model("nano", tokenizer, seed=0).eval()


@pytest.fixture(scope="module")
def policy_dir(policy, tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("nano")
    policy.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def start_engine(policy_dir, policy, tokenizer, lora_rank=0) -> VLLMEngine:
    settings = VLLMSettings(enforce_eager=True, kv_cache_gib=1)
    return VLLMEngine(
        policy_dir, tokenizer, eos_ids(policy, tokenizer), settings, max_batch_size=16,
        lora_rank=lora_rank,
    )  # fmt: skip


@pytest.fixture(scope="module")
def engine(policy_dir, policy, tokenizer):
    """One engine for the module; only the last test leaves it unusable."""
    return start_engine(policy_dir, policy, tokenizer)


def chat_prompts(tokenizer, n: int) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {i} + {2 * i + 1}?"}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for i in range(n)
    ]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def trainer_logprobs(model, prompt, completion, temperature, top_k=0, top_p=1.0) -> torch.Tensor:
    """Logprobs of `completion` under the sampling distribution, computed by the training model."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        if top_k == 0 and top_p == 1.0:
            lp, _ = token_logprobs(model, ids, torch.ones_like(ids), temperature)
            return lp[0, len(prompt) - 1 :]
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
        dist = sampling_logprobs(logits, temperature, top_k, top_p)
        return dist.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 20, 0.9)])
def test_logprobs_are_those_the_trainer_computes(
    engine, policy, tokenizer, temperature, top_k, top_p
):
    batch = chat_prompts(tokenizer, 4)
    params = SamplingParams(24, temperature, top_p, top_k)
    completions = engine.generate(batch, params, seeds=[11, 12, 13, 14])
    for prompt, completion in zip(batch, completions):
        assert len(completion.token_ids) == len(completion.logprobs) > 0
        expected = trainer_logprobs(policy, prompt, completion.token_ids, temperature, top_k, top_p)
        assert torch.isfinite(expected).all()  # every sampled token survived top-k/top-p
        assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=LOGPROB_TOL)


def test_a_sample_depends_only_on_its_seed(engine, tokenizer):
    batch = chat_prompts(tokenizer, 3)
    params = SamplingParams(16, 1.0)
    together = engine.generate(batch, params, seeds=[1, 2, 3])
    alone = engine.generate(batch[1:2], params, seeds=[2])
    reordered = engine.generate([batch[2], batch[0]], params, seeds=[3, 1])
    assert alone[0].token_ids == together[1].token_ids
    assert [c.token_ids for c in reordered] == [together[2].token_ids, together[0].token_ids]
    other_seed = engine.generate(batch[1:2], params, seeds=[99])
    assert other_seed[0].token_ids != together[1].token_ids


def test_greedy_decoding_and_stops_match_the_embedded_engine(engine, policy, tokenizer):
    batch = chat_prompts(tokenizer, 4)
    hf = HFEngine(policy, tokenizer)
    greedy = SamplingParams(20, 0.0)
    plain = engine.generate(batch, greedy)
    # stop at each reply's second visible character (char-level tokenizer: its second token)
    stop = tuple({c.text[:2] for c in plain if len(c.text) >= 2})
    assert stop  # at least one reply says something
    for params in [greedy, SamplingParams(20, 0.0, stop=stop)]:
        ours, theirs = engine.generate(batch, params), hf.generate(batch, params)
        for a, b in zip(ours, theirs):
            assert (a.token_ids, a.finish_reason, a.text) == (b.token_ids, b.finish_reason, b.text)
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    stopped = [c for c in ours if c.finish_reason == "stop"]
    assert stopped and all(len(c.token_ids) <= 2 for c in stopped)
    assert all(c.finish_reason == "length" for c in plain)


def test_an_eos_token_ends_the_reply_and_is_kept(engine, policy, tokenizer):
    batch = chat_prompts(tokenizer, 2)
    greedy = SamplingParams(12, 0.0)
    third = engine.generate(batch[:1], greedy)[0].token_ids[2]  # make it an end token
    saved = engine.eos_ids
    engine.eos_ids = sorted({*saved, third})
    try:
        completion = engine.generate(batch[:1], greedy)[0]
    finally:
        engine.eos_ids = saved
    assert completion.finish_reason == "eos"
    assert completion.token_ids[-1] == third and len(completion.token_ids) <= 3


def sample_and_score(engine, model, tokenizer):
    """Engine logprobs of fixed sampled tokens, the trainer model's on the same tokens."""
    batch = chat_prompts(tokenizer, 3)
    completions = engine.generate(batch, SamplingParams(16, 1.0), seeds=[5, 6, 7])
    ours = torch.cat([torch.tensor(c.logprobs) for c in completions])
    theirs = torch.cat(
        [trainer_logprobs(model, p, c.token_ids, 1.0) for p, c in zip(batch, completions)]
    )
    return ours, theirs, completions


def test_after_a_sync_the_engine_samples_from_the_new_weights(engine, policy, tokenizer):
    updated = copy.deepcopy(policy)
    with torch.no_grad():  # an update's worth of change to every weight
        for p in updated.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    before, old, completions = sample_and_score(engine, policy, tokenizer)
    assert torch.allclose(before, old, atol=LOGPROB_TOL)
    engine.load_weights(updated)
    try:
        after, new, _ = sample_and_score(engine, updated, tokenizer)
        assert torch.allclose(after, new, atol=LOGPROB_TOL)
        stale = torch.cat(
            [
                trainer_logprobs(policy, p, c.token_ids, 1.0)
                for p, c in zip(chat_prompts(tokenizer, 3), completions)
            ]
        )
        assert (new - stale).abs().mean() > 0.05  # the check above could tell old from new
    finally:
        engine.load_weights(policy)
    assert torch.allclose(sample_and_score(engine, policy, tokenizer)[0], before, atol=1e-6)


def test_a_lora_policy_reaches_the_engine_merged(engine, policy, tokenizer):
    adapted = apply_lora(copy.deepcopy(policy), LoraSettings(r=4, alpha=8))
    randomize_adapters(adapted, seed=0)
    engine.load_weights(adapted)
    try:
        ours, theirs, _ = sample_and_score(engine, adapted, tokenizer)
        base = sample_and_score(engine, policy, tokenizer)[1]
        assert torch.allclose(ours, theirs, atol=LOGPROB_TOL)
        assert not torch.allclose(theirs, base, atol=1e-2)
    finally:
        engine.load_weights(policy)


def randomize_adapters(model, seed: int) -> None:
    """B starts at zero (a no-op adapter): give the adapters something to say."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def test_a_lora_engine_takes_the_adapter_alone_at_each_sync(policy_dir, policy, tokenizer):
    engine = start_engine(policy_dir, policy, tokenizer, lora_rank=4)
    adapted = apply_lora(copy.deepcopy(policy), LoraSettings(r=4, alpha=8))
    base = sample_and_score(engine, policy, tokenizer)
    assert torch.allclose(base[0], base[1], atol=LOGPROB_TOL)  # no adapter yet: the base
    for seed in (1, 2):  # the second sync must replace the first adapter, not reuse it
        randomize_adapters(adapted, seed)
        engine.load_weights(adapted)
        ours, theirs, _ = sample_and_score(engine, adapted, tokenizer)
        assert torch.allclose(ours, theirs, atol=LOGPROB_TOL)
        assert not torch.allclose(theirs, base[1], atol=1e-2)
    sent = sum(f.stat().st_size for f in Path(engine.adapter_dir).glob("*.safetensors"))
    assert 0 < sent < sum(p.numel() * 4 for p in policy.parameters()) / 5


def test_weights_of_another_shape_are_refused_with_the_fix(policy_dir, policy, tokenizer):
    engine = start_engine(policy_dir, policy, tokenizer)
    wider = build_model("micro", tokenizer, seed=0)
    with pytest.raises(WeightSyncError, match="same architecture"):
        engine.load_weights(wider)
    # half-loaded weights are never sampled from
    with pytest.raises(WeightSyncError, match="partly loaded"):
        engine.generate(chat_prompts(tokenizer, 1), SamplingParams(4, 1.0), seeds=[0])


def test_a_sync_that_overruns_its_timeout_raises_instead_of_hanging(engine, policy, tokenizer):
    engine.settings = VLLMSettings(sync_timeout=1e-4)
    with pytest.raises(WeightSyncError, match="sync_timeout"):
        engine.load_weights(policy)
    for thread in threading.enumerate():  # let the abandoned sync end before the engine goes
        if thread.name == "rlvr-weight-sync":
            thread.join()
    with pytest.raises(WeightSyncError, match="partly loaded"):
        engine.generate(chat_prompts(tokenizer, 1), SamplingParams(4, 1.0), seeds=[0])
