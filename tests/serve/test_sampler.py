"""Sampler snapshots: one adapter per saved path, the oldest dropped past `keep`, so an RL loop
that saves weights every step does not grow the model."""

import pytest
import torch

from rlvr.models import tiny
from rlvr.serve.adapters import AdapterHost
from rlvr.serve.sampler import Sampler


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
