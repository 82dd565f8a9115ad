"""The real tinker SDK against `rlvr serve` on the tiny model: a step through the service equals
the same step computed by hand (loss, gradient norm, weights); checkpoints survive a restart;
clients are isolated; bad requests are refused by name and change nothing."""

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict

from rlvr.models import tiny
from rlvr.serve.adapters import LAYERS, LORA_ALPHA

from .conftest import KEY, client, running

tinker = pytest.importorskip("tinker")
types = tinker.types

RANK, LR = 4, 1e-2
PAIRS = [("<|user|>12+34=<|end|><|assistant|>", "46<|end|>"), ("<|user|>7+5=<|end|>", "12<|end|>")]


def sequences(tokenizer):
    """(input ids, target ids, completion mask) per pair: targets are the inputs shifted by one,
    and only the completion is trained on."""
    out = []
    for prompt, reply in PAIRS:
        p, r = tokenizer.encode(prompt), tokenizer.encode(reply)
        full = p + r
        mask = [0.0] * (len(p) - 1) + [1.0] * len(r)
        out.append((full[:-1], full[1:], mask))
    return out


def reference_model():
    """The served base and a fresh adapter, built as the service builds them."""
    tokenizer = tiny.build_tokenizer()
    model = tiny.build_model("nano", tokenizer, 0).eval().requires_grad_(False)
    targets = sorted({layer for layers in LAYERS.values() for layer in layers})
    config = LoraConfig(r=RANK, lora_alpha=LORA_ALPHA, target_modules=targets, lora_dropout=0.0)
    torch.manual_seed(0)
    return get_peft_model(model, config, adapter_name="ref"), tokenizer


def token_logprobs(model, ids, targets):
    logits = model(input_ids=torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(targets)[:, None])[:, 0]


def sampled_logprobs(model, seqs):
    """A stand-in sampler's logprobs: the model's own, moved +-0.3 so the ratio leaves PPO's
    [0.8, 1.2] on some tokens."""
    with torch.no_grad():
        return [
            token_logprobs(model, ids, targets)
            + 0.3 * torch.tensor([(-1) ** i for i in range(len(ids))])
            for ids, targets, _ in seqs
        ]


def reference_step(model, seqs, loss_fn, sampled):
    """Tinker's loss by its formula, one datum at a time (no padding), then AdamW."""
    loss = torch.zeros(())
    for (ids, targets, mask), q in zip(seqs, sampled, strict=True):
        logp, m = token_logprobs(model, ids, targets), torch.tensor(mask)
        if loss_fn == "cross_entropy":
            loss = loss - (m * logp).sum()
        else:
            ratio, adv = torch.exp(logp - q), m * torch.linspace(-1.0, 2.0, len(ids))
            loss = loss - torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).sum()
    loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
    torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0).step()
    return float(loss.detach()), norm


def datums(seqs, loss_fn, sampled):
    out = []
    for (ids, targets, mask), q in zip(seqs, sampled, strict=True):
        inputs = {"target_tokens": targets}
        if loss_fn == "cross_entropy":
            inputs["weights"] = mask
        else:
            inputs["logprobs"] = q.tolist()
            inputs["advantages"] = (np.array(mask) * np.linspace(-1.0, 2.0, len(ids))).tolist()
        out.append(types.Datum(model_input=types.ModelInput.from_ints(ids), loss_fn_inputs=inputs))
    return out


def assert_same_weights(served_weights, model):
    want = get_peft_model_state_dict(model, adapter_name="ref", save_embedding_layers=False)
    assert sorted(served_weights) == sorted(want)
    for key, value in want.items():
        torch.testing.assert_close(served_weights[key], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "ppo"])
def test_a_step_through_the_service_equals_the_step_by_hand(served, loss_fn):
    url, service = served
    ref, tokenizer = reference_model()
    seqs = sequences(tokenizer)
    sampled = sampled_logprobs(ref, seqs)
    training = (
        client(url).create_lora_training_client(base_model="tiny", rank=RANK, seed=0).result()
    )
    result = training.forward_backward(datums(seqs, loss_fn, sampled), loss_fn).result()
    step = training.optim_step(types.AdamParams(learning_rate=LR)).result()
    want_loss, want_norm = reference_step(ref, seqs, loss_fn, sampled)
    assert result.metrics["loss:sum"] == pytest.approx(want_loss, rel=1e-5)
    assert step.metrics["grad_norm"] == pytest.approx(want_norm, rel=1e-4)
    with torch.no_grad():  # the logprobs it returned are the pre-step policy's
        before = reference_model()[0]
        for out, (ids, targets, _) in zip(result.loss_fn_outputs, seqs, strict=True):
            np.testing.assert_allclose(
                out["logprobs"].to_numpy(),
                token_logprobs(before, ids, targets),
                rtol=1e-5,
                atol=1e-6,
            )
    path = training.save_state("after").result().path
    assert_same_weights(service.read(path)["weights"], ref)


def sft_step(training, seqs):
    loss = training.forward_backward(
        datums(seqs, "cross_entropy", [None] * len(seqs)), "cross_entropy"
    )
    training.optim_step(types.AdamParams(learning_rate=LR)).result()
    return loss.result().metrics["loss:sum"]


def test_save_restart_load_gives_the_same_next_step(tmp_path):
    state = tmp_path / "state"
    with running(state, api_key=KEY) as (url, service):
        training = client(url).create_lora_training_client(base_model="tiny", rank=RANK).result()
        seqs = sequences(training.get_tokenizer())
        sft_step(training, seqs)
        checkpoint = training.save_state("one").result().path
        first_loss = sft_step(training, seqs)  # Adam's second step: its moments matter
        continued = service.read(training.save_state("two").result().path)["weights"]
    with running(state, api_key=KEY) as (url, service):
        sc = client(url)
        resumed = sc.create_training_client_from_state_with_optimizer(checkpoint).result()
        assert sft_step(resumed, seqs) == pytest.approx(first_loss, rel=1e-6)
        reloaded = service.read(resumed.save_state("two").result().path)["weights"]
        for key, value in continued.items():
            torch.testing.assert_close(reloaded[key], value, rtol=0, atol=0)
        fresh = sc.create_training_client_from_state(checkpoint).result()  # weights, new Adam
        sft_step(fresh, seqs)
        weights_only = service.read(fresh.save_state("two").result().path)["weights"]
        assert any(not torch.equal(weights_only[k], v) for k, v in continued.items())


def forward_logprobs(training, seqs):
    result = training.forward(datums(seqs, "cross_entropy", [None] * len(seqs)), "cross_entropy")
    return [out["logprobs"].to_numpy() for out in result.result().loss_fn_outputs]


def test_two_clients_do_not_see_each_others_adapters(served):
    url, _ = served
    sc = client(url)
    first = sc.create_lora_training_client(base_model="tiny", rank=RANK, seed=1).result()
    second = sc.create_lora_training_client(base_model="tiny", rank=RANK, seed=2).result()
    seqs = sequences(first.get_tokenizer())
    untouched = forward_logprobs(second, seqs)
    start = forward_logprobs(first, seqs)
    for _ in range(3):
        sft_step(first, seqs)
    second.optim_step(types.AdamParams(learning_rate=LR)).result()  # no gradients of its own
    for before, after in zip(untouched, forward_logprobs(second, seqs), strict=True):
        np.testing.assert_array_equal(before, after)
    trained = forward_logprobs(first, seqs)
    assert sum(a.sum() for a in trained) > sum(s.sum() for s in start)  # its replies got likelier


def test_sampling_from_saved_weights_and_prompt_logprobs(served):
    url, _ = served
    sc = client(url)
    training = sc.create_lora_training_client(base_model="tiny", rank=RANK).result()
    seqs = sequences(training.get_tokenizer())
    for _ in range(3):
        sft_step(training, seqs)
    sampler = training.save_weights_and_get_sampling_client().result()
    ids, targets, _ = seqs[0]
    prompt = types.ModelInput.from_ints(ids)
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=7)
    first = sampler.sample(prompt, 3, params, include_prompt_logprobs=True).result()
    again = sampler.sample(prompt, 3, params).result()
    assert [s.tokens for s in first.sequences] == [s.tokens for s in again.sequences]
    assert all(len(s.tokens) == len(s.logprobs) <= 4 for s in first.sequences)
    assert first.prompt_logprobs[0] is None
    want = forward_logprobs(training, seqs)[0][: len(ids) - 1]
    np.testing.assert_allclose(first.prompt_logprobs[1:], want, rtol=1e-5, atol=1e-5)
    named = training.save_weights_for_sampler("named").result().path
    from_path = sc.create_sampling_client(model_path=named)  # asks the service for its base
    assert from_path.get_base_model() == "tiny"
    again_from_path = from_path.sample(prompt, 3, params).result().sequences
    assert [s.tokens for s in again_from_path] == [s.tokens for s in first.sequences]
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=4, temperature=0.0)).result()
    token = greedy.sequences[0].tokens[0]  # its logprob: the trained policy's, at the prompt's end
    scored = forward_logprobs(training, [(ids, [*ids[1:], token], [1.0] * len(ids))])[0]
    assert greedy.sequences[0].logprobs[0] == pytest.approx(float(scored[-1]), abs=1e-4)


def expect_refusal(call, *needles):
    with pytest.raises(Exception) as caught:  # the SDK's own error types, whichever it raises
        call()
    message = str(caught.value)
    assert all(n in message for n in needles), message


def test_bad_requests_are_refused_by_name_and_change_nothing(served):
    url, service = served
    training = client(url).create_lora_training_client(base_model="tiny", rank=RANK).result()
    seqs = sequences(training.get_tokenizer())
    before = forward_logprobs(training, seqs)
    (ids, targets, mask) = seqs[0]
    good = datums(seqs, "cross_entropy", [None, None])
    expect_refusal(lambda: training.forward_backward(good, "sft").result(), "unknown loss_fn 'sft'")
    short = types.Datum(
        model_input=types.ModelInput.from_ints(ids),
        loss_fn_inputs={"target_tokens": targets[:-1], "weights": mask[:-1]},
    )
    expect_refusal(lambda: training.forward_backward([short], "cross_entropy").result(), "differ")
    long = types.Datum(
        model_input=types.ModelInput.from_ints([5] * 600),
        loss_fn_inputs={"target_tokens": [5] * 600, "weights": [1.0] * 600},
    )
    expect_refusal(
        lambda: training.forward_backward([long], "cross_entropy").result(), "600 tokens"
    )
    expect_refusal(lambda: training.forward_backward(good, "ppo").result(), "lacks", "advantages")
    training.optim_step(types.AdamParams(learning_rate=LR)).result()  # no gradient was kept
    for was, now in zip(before, forward_logprobs(training, seqs), strict=True):
        np.testing.assert_array_equal(was, now)
    expect_refusal(
        lambda: (
            client(url).create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()
        ),
        "'Qwen/Qwen3-8B' is not served here",
    )


def test_a_key_is_checked_and_a_large_request_refused(tmp_path):
    with running(tmp_path / "state", api_key=KEY, max_request_mb=0.01) as (url, _):
        expect_refusal(lambda: client(url, api_key="tml-wrong").create_rest_client(), "API key")
        training = client(url).create_lora_training_client(base_model="tiny", rank=RANK).result()
        big = types.Datum(
            model_input=types.ModelInput.from_ints([5] * 400),
            loss_fn_inputs={"target_tokens": [5] * 400, "weights": [1.0] * 400},
        )
        expect_refusal(
            lambda: training.forward_backward([big] * 8, "cross_entropy").result(), "413"
        )


def test_a_client_that_hangs_up_mid_call_leaves_the_service_working(served):
    url, _ = served
    httpx = pytest.importorskip("httpx")
    body = {
        "num_samples": 8, "base_model": "tiny", "prompt": {"chunks": [{"tokens": [5, 6, 7]}]},
        "sampling_params": {"max_tokens": 300, "temperature": 1.0}, "type": "sample",
    }  # fmt: skip
    started = httpx.post(f"{url}/api/v1/asample", json=body, headers={"X-API-Key": KEY}).json()
    with pytest.raises(httpx.TimeoutException):  # hang up while the sample is still running
        httpx.post(
            f"{url}/api/v1/retrieve_future",
            json={"request_id": started["request_id"]},
            timeout=0.05,
        )
    training = client(url).create_lora_training_client(base_model="tiny", rank=RANK).result()
    assert forward_logprobs(training, sequences(training.get_tokenizer()))
    done = httpx.post(
        f"{url}/api/v1/retrieve_future", json={"request_id": started["request_id"]}, timeout=60
    )
    assert done.headers["content-type"] == "application/x-protobuf"


def test_a_tinker_only_call_is_refused_by_name(served):
    url, _ = served
    rest = client(url).create_rest_client()
    expect_refusal(lambda: rest.list_training_runs().result(), "does not serve", "training_runs")
