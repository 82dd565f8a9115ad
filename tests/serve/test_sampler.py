"""Sampler snapshots: one adapter per saved path, the oldest dropped past `keep`, so an RL loop
that saves weights every step does not grow the model; and vLLM sampling the saved adapters as
rlvr's HF engine does."""

import importlib.util

import numpy as np
import pytest
import torch

from rlvr.config import VLLMSettings
from rlvr.models import tiny
from rlvr.serve import served_settings
from rlvr.serve.adapters import AdapterHost
from rlvr.serve.sampler import Sampler
from rlvr.serve.wire import Datum

from .conftest import client, running


def test_old_snapshots_leave_the_model_and_new_ones_sample_their_own_weights():
    tokenizer = tiny.build_tokenizer()
    host = AdapterHost("tiny", tiny.build_model("nano", tokenizer, 0), tokenizer)
    host.add("client", {"rank": 4, "seed": 0})
    sampler = Sampler(host, keep=2)
    states = []
    for step in range(3):
        with torch.no_grad():
            for p in host.adapters["client"].params:
                p.add_(0.05 * (step + 1))  # each saved state is a different policy
        states.append(host.state("client", optimizer=False))
    names = [
        sampler.snapshot(f"tinker://c/sampler_weights/{i}", lambda s=s: s)
        for i, s in enumerate(states)
    ]
    assert set(host.model.peft_config) == {"client", names[1], names[2]}
    assert sampler.snapshot("tinker://c/sampler_weights/2", None) == names[2]  # not reloaded
    prompt = tokenizer.encode("<|user|>1+2<|end|><|assistant|>")
    params, seeds = {"max_tokens": 3, "temperature": 0.0}, [0]
    newest, _ = sampler.sample(
        "tinker://c/sampler_weights/2", None, prompt, 1, params, False, seeds
    )
    base, _ = sampler.sample(None, None, prompt, 1, params, False, seeds)
    with host.active("client") as model, torch.no_grad():  # the same weights, as trained
        ids = torch.tensor([prompt + newest[0]["tokens"][:-1]])
        scored = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 :], -1)
    want = scored.gather(-1, torch.tensor(newest[0]["tokens"])[:, None])[:, 0].tolist()
    assert newest[0]["logprobs"] == pytest.approx(want, abs=1e-5)
    assert newest[0]["logprobs"] != base[0]["logprobs"]


def scored_by_hf(host, adapter, prompt, tokens):
    """Each of `tokens`' logprobs after `prompt` under `adapter`, by rlvr's own forward."""
    ids = np.asarray(prompt + tokens, dtype=np.int64)
    datum = Datum(ids[:-1], {"target_tokens": ids[1:]})
    (logprobs,), _ = host.forward_backward(adapter, [datum], None, {}, backward=False)
    return logprobs[-len(tokens) :]


@pytest.mark.vllm
@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed: scripts/vllm_cpu_tests.sh sets it up and runs this",
)
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_vllm_samples_saved_adapters_as_the_hf_engine_does(tmp_path, backend):
    """In this process, and on a Ray rollout worker (Ray started by the service itself)."""
    from .test_app import sequences, sft_step

    types = pytest.importorskip("tinker").types
    settings = VLLMSettings(enforce_eager=True, kv_cache_gib=1)
    ray = ["distributed.rollout_workers=1", "distributed.worker_cpus=0.5"]
    distributed = served_settings([f"distributed.backend={backend}", *ray]).distributed
    with running(tmp_path, engine="vllm", vllm=settings, max_lora_rank=8,
                 distributed=distributed) as (url, service):  # fmt: skip
        sc = client(url)
        training = sc.create_lora_training_client(base_model="tiny", rank=4).result()
        seqs = sequences(training.get_tokenizer())
        for _ in range(3):
            sft_step(training, seqs)
        path = training.save_weights_for_sampler("trained").result().path
        sampling = sc.create_sampling_client(model_path=path)
        prompt = seqs[0][0]
        tokenizer = tiny.build_tokenizer()
        hf = Sampler(AdapterHost("tiny", tiny.build_model("nano", tokenizer, 0), tokenizer))

        def sample(client, n, **params):
            request = (types.ModelInput.from_ints(prompt), n, types.SamplingParams(**params), True)
            return client.sample(*request).result()

        greedy = {"max_tokens": 6, "temperature": 0.0}
        got = sample(sampling, 1, **greedy)
        want, scored = hf.sample(path, lambda: service.read(path), prompt, 1, greedy, True, [0])
        assert got.sequences[0].tokens == want[0]["tokens"]  # the trained adapter's argmax
        np.testing.assert_allclose(got.sequences[0].logprobs, want[0]["logprobs"], atol=1e-4)
        np.testing.assert_allclose(got.prompt_logprobs[1:], scored[1:], atol=1e-5)
        drawn = sample(sampling, 4, max_tokens=6, seed=3)
        assert [s.tokens for s in drawn.sequences] == [
            s.tokens for s in sample(sampling, 4, max_tokens=6, seed=3).sequences
        ]  # a seed gives the same samples again
        for s in drawn.sequences:  # each logprob is the trained policy's, as rlvr computes it
            adapter = hf.snapshot(path, None)
            np.testing.assert_allclose(
                s.logprobs, scored_by_hf(hf.host, adapter, prompt, s.tokens), atol=1e-4
            )
        untrained = sample(sc.create_sampling_client(base_model="tiny"), 1, **greedy)
        assert not np.allclose(untrained.sequences[0].logprobs, got.sequences[0].logprobs)
        wide = sc.create_lora_training_client(base_model="tiny", rank=16).result()
        with pytest.raises(Exception, match="--max-lora-rank"):
            sample(wide.save_weights_and_get_sampling_client().result(), 1, max_tokens=2)
