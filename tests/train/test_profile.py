"""The profiler: FLOP estimates against torch's own count, the per-step numbers against hand
computations, and phases that partition the step."""

import copy

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from rlvr.config import LoraSettings, load_config
from rlvr.models.lora import apply_lora
from rlvr.models.shared_prefix import find_prompts
from rlvr.models.tiny import build_model
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.train.profile import (
    PHASES,
    ModelShape,
    compute_setting,
    cost_model,
    mean_metrics,
    micro_batch_forwards,
    peak_flops,
    phase_table,
    step_flops,
    step_total,
    utilisation,
)
from rlvr.train.trainer import Trainer
from rlvr.types import Batch, Problem, Trajectory


@pytest.fixture(scope="module")
def eager_model(tokenizer):
    """Eager attention: its scores and weighted values are matmuls torch's counter sees."""
    model = build_model("nano", tokenizer, seed=0).eval()
    model.set_attn_implementation("eager")
    return model


def counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_a_forward_pass_costs_what_torch_counts(eager_model):
    shape = ModelShape.of(eager_model)
    ids = torch.randint(10, 100, (3, 17))
    with torch.no_grad():
        flops = counted(lambda: eager_model(input_ids=ids))
    assert shape.forward(3, 17) == pytest.approx(flops, rel=1e-9)
    assert shape.forward(3, 17) > 2 * (shape.body + shape.head) * 3 * 17  # attention counts


def test_cached_decoding_costs_what_torch_counts(eager_model, tokenizer):
    """One prompt token, then 11 sampled with a KV cache: 12 positions, each processed once
    and attending to itself and those before it, the head on every sampled token."""
    shape = ModelShape.of(eager_model)
    engine = HFEngine(eager_model, tokenizer)
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    out = []
    flops = counted(lambda: out.extend(engine.generate([[5]], params, [3])))
    generated = len(out[0].token_ids)
    assert generated == 12 and out[0].finish_reason == "length"
    assert shape.sequence(1 + generated - 1, generated) == pytest.approx(flops, rel=1e-9)


def test_a_lora_model_counts_its_adapters(eager_model):
    lora = apply_lora(copy.deepcopy(eager_model), LoraSettings(r=4))
    plain, adapted = ModelShape.of(eager_model), ModelShape.of(lora)
    ids = torch.randint(10, 100, (2, 9))
    with torch.no_grad():
        flops = counted(lambda: lora(input_ids=ids))
    assert adapted.body > plain.body and adapted.head == plain.head
    assert adapted.forward(2, 9) == pytest.approx(flops, rel=1e-9)


def trajectory(prompt: int, generated: int) -> Trajectory:
    n = prompt + generated
    return Trajectory(
        problem=Problem("p", "x"), group_id=0, sample_index=0, token_ids=[1] * n,
        loss_mask=[0] * prompt + [1] * generated, behaviour_logprobs=[0.0] * n,
        turn_rewards=[1.0], turn_ends=[n],
    )  # fmt: skip


def test_step_flops_by_hand():
    shape = ModelShape(body=100, head=20, layers=2, attention_width=4, hidden=5)
    samples = [trajectory(3, 2), trajectory(3, 5), trajectory(2, 1)]  # lengths 5, 8, 3
    batch = Batch.from_trajectories(samples, 0)
    got = step_flops(shape, samples, batch, 2, {"update": 3.0, "values": 1.0})
    # generation: each sequence once, all but its last token processed (that token is never
    # fed back); attention over 1..n positions; the head on each sampled token
    attention = 4 * 2 * 4
    generate = sum(
        2 * 100 * (n - 1) + attention * (n - 1) * n / 2 + 2 * 20 * g
        for n, g in ((5, 2), (8, 5), (3, 1))
    )
    assert got["flops/generate"] == pytest.approx(generate)
    # micro-batches of 2 rows: [5, 8] padded to 8, then [3]
    forward = (2 * 120 * 16 + attention * 2 * 64) + (2 * 120 * 3 + attention * 9)
    critic = (2 * 105 * 16 + attention * 2 * 64) + (2 * 105 * 3 + attention * 9)
    assert got["flops_per_pass/policy"] == pytest.approx(forward)
    assert got["flops/update"] == pytest.approx(3 * forward)
    assert got["flops/values"] == pytest.approx(critic)
    assert got["padding/train"] == pytest.approx(1 - 16 / 19)
    assert got["tokens/generated"] == 8 and got["tokens/trained"] == 16
    assert micro_batch_forwards(shape, torch.tensor([5, 8, 3]), 3) == (shape.forward(3, 8), 24, 16)


def test_the_update_is_counted_over_the_rows_it_ran_on():
    """train.skip_zero_advantage: the update's FLOPs and tokens/trained count only its rows;
    every other pass still runs on the whole batch."""
    shape = ModelShape(body=100, head=20, layers=2, attention_width=4, hidden=5)
    samples = [trajectory(3, 2), trajectory(3, 5), trajectory(2, 1)]  # lengths 5, 8, 3
    batch = Batch.from_trajectories(samples, 0)
    passes = {"update": 3.0, "ref_logprobs": 1.0}
    got = step_flops(shape, samples, batch, 2, passes, update_rows=torch.tensor([0, 2]))
    attention = 4 * 2 * 4
    rows_0_and_2 = 2 * 120 * 10 + attention * 2 * 25  # one micro-batch [5, 3] padded to 5
    whole = step_flops(shape, samples, batch, 2, passes)
    assert got["flops/update"] == pytest.approx(3 * rows_0_and_2)
    assert got["flops/ref_logprobs"] == whole["flops/ref_logprobs"] == whole["flops/update"] / 3
    assert got["tokens/trained"] == 8 and whole["tokens/trained"] == 16


def test_shared_prompts_are_counted_once_per_micro_batch():
    shape = ModelShape(body=100, head=20, layers=2, attention_width=4, hidden=5)
    # two prompts: 4 tokens x 2 samples (lengths 7, 9), 2 tokens x 1 sample (length 5)
    samples = [trajectory(5, 2), trajectory(5, 4), trajectory(3, 2)]
    samples[2].token_ids = [2] * 5
    batch = Batch.from_trajectories(samples, 0)
    prompts = find_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask)
    assert prompts.length.tolist() == [4, 4, 2]
    got = step_flops(shape, samples, batch, 3, {"update": 3.0}, prompts)
    # the prompts [2, 4 tokens] left-padded to 4, the head on their last position; then the
    # suffixes (2, 4, 2 positions) padded to 4, attending to 4 cached positions and their own
    attention = 4 * 2 * 4
    prefix = 2 * 100 * 8 + attention * 2 * 16 + 2 * 20 * 2
    suffix = 2 * 120 * 12 + attention * 3 * 4 * 8
    assert got["flops_per_pass/policy"] == pytest.approx(prefix + suffix)
    assert got["tokens/trained"] == 21 and got["tokens/shared_prompt"] == 21 - 14
    assert got["padding/train"] == pytest.approx(1 - 14 / 20)
    # a micro-batch in which no prompt has two rows runs as one plain forward
    alone = step_flops(shape, samples, batch, 1, {"update": 3.0}, prompts)
    plain = step_flops(shape, samples, batch, 1, {"update": 3.0})
    assert alone["flops_per_pass/policy"] == plain["flops_per_pass/policy"]


def test_utilisation_and_cost_model_by_hand():
    metrics = {"flops/update": 6e9, "time/update": 2.0, "flops/generate": 1e9}
    assert utilisation(metrics, peak=6e9) == {
        "flops_per_sec/update": 3e9,
        "utilisation/update": 0.5,
    }  # no time for generate: nothing to divide
    step = {"flops/generate": 10.0, "flops_per_pass/policy": 2.0, "flops_per_pass/critic": 1.0}
    assert cost_model(step, epochs=1, critic_updates=2) == [
        ("GRPO", 16.0),
        ("GRPO + KL reference", 18.0),
        ("PPO (critic + reference)", 10 + 4 + 1 + 6 + 6),
    ]
    assert cost_model(step, epochs=2, critic_updates=1)[0] == ("GRPO", 10 + 12 + 2)
    per_step = {"flops/generate": 10.0, "flops/update": 6.0, "flops_per_pass/policy": 2.0,
                "flops_per_sec/update": 3.0}  # fmt: skip
    assert step_total(per_step) == 16.0  # a pass's cost and a rate are not a phase's FLOPs
    assert mean_metrics([{"a": 1.0, "b": 4.0}, {"a": 3.0}]) == {"a": 2.0, "b": 2.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_peak_is_timed_in_the_dtype_and_on_the_device_asked(dtype, monkeypatch):
    """The matmuls timed are of `dtype` on `device`, and the peak says which it measured."""
    seen, matmul = set(), torch.Tensor.__matmul__

    def spy(a, b):
        seen.add((a.dtype, b.dtype, a.device.type, b.device.type))
        return matmul(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    peak = peak_flops.__wrapped__("cpu", dtype, seconds=0.01)  # uncached: the spy sees it
    assert seen == {(dtype, dtype, "cpu", "cpu")}
    assert peak.flops > 0 and (peak.device, peak.dtype) == ("cpu", str(dtype)[6:])
    assert f"{str(dtype)[6:]} matmul on {torch.get_num_threads()} threads" in str(peak)


def test_the_peak_follows_the_model_weights_and_autocast(tokenizer):
    """The largest weight's dtype (under LoRA the frozen base's, not the adapters'), bfloat16
    under train.autocast=bfloat16."""
    model = build_model("nano", tokenizer, seed=0).to(torch.bfloat16)
    assert compute_setting(model) == (torch.device("cpu"), torch.bfloat16)
    assert compute_setting(model.float(), "bfloat16") == (torch.device("cpu"), torch.bfloat16)
    lora = apply_lora(build_model("nano", tokenizer, seed=0).to(torch.bfloat16), LoraSettings(r=4))
    assert {p.dtype for p in lora.parameters() if p.requires_grad} == {torch.float32}
    assert compute_setting(lora) == (torch.device("cpu"), torch.bfloat16)


@pytest.mark.parametrize("extra", [[], ["algo.kl_coef=0.05", "algo.advantage=gae"]])
def test_the_phases_partition_every_step(fast_overrides, extra):
    """What no phase timed is the few statements between the timers: under 5% of the step."""
    trainer = Trainer(load_config(None, [*fast_overrides, "train.steps=2", *extra]))
    assert (trainer.peak.device, trainer.peak.dtype) == ("cpu", "float32")
    trainer.run()
    steps = [r for r in trainer.run_dir.read_metrics() if "time/step" in r]
    assert len(steps) == 2
    for step in steps:
        inside = sum(step.get(f"time/{phase}", 0.0) for phase in PHASES)
        assert 0.95 * step["time/step"] <= inside <= step["time/step"]
        assert all(step.get(f"time/{phase}", 0.0) >= 0 for phase in PHASES)
        assert step["flops/generate"] > 0 and step["utilisation/update"] > 0
        assert ("flops/ref_logprobs" in step) == bool(extra)
        assert ("flops/critic" in step) == bool(extra)
    rows = {row[0]: row for row in phase_table(steps)}
    assert rows["update"][3] == pytest.approx(
        sum(s["flops/update"] for s in steps) / 2
    )  # fmt: skip
    assert abs(rows["unaccounted"][2]) < 0.05
