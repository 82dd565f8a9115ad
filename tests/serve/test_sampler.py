"""Sampler snapshots: one adapter per saved path, the oldest dropped past `keep`, so an RL loop
that saves weights every step does not grow the model."""

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
    params = {"max_tokens": 3, "temperature": 0.0}
    newest, _ = sampler.sample(names[2], prompt, 1, params, False)
    current, _ = sampler.sample("client", prompt, 1, params, False)  # the same weights
    base, _ = sampler.sample(None, prompt, 1, params, False)
    assert newest[0]["logprobs"] == current[0]["logprobs"]
    assert newest[0]["logprobs"] != base[0]["logprobs"]
