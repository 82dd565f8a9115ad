"""A real architecture end to end: a Qwen2 with a trained BPE tokenizer and the ChatML template,
saved with save_pretrained and trained by `rlvr train model.name=<dir>` through each engine."""

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlvr.cli import main
from rlvr.models.scratch import build_scratch_model

VLLM = pytest.param(
    "vllm",
    marks=[
        pytest.mark.vllm,
        pytest.mark.skipif(
            importlib.util.find_spec("vllm") is None,
            reason="vLLM is not installed: scripts/vllm_cpu_tests.sh sets it up and runs these",
        ),
    ],
)

# single-turn arithmetic; multi-turn search with a tool the ChatML template renders
TASKS = {
    "arithmetic": [],
    "search_qa": ["rollout.max_turns=3", "rollout.max_total_tokens=900"],
}


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory):
    return build_scratch_model(tmp_path_factory.mktemp("qwen2"), "qwen2-test", seed=0)


def train(qwen2_dir, run_dir, *overrides):
    main(
        [
            "train",
            f"model.name={qwen2_dir}",
            "train.steps=2",
            "train.lr=1e-3",
            # a random model scores 0 on every sample, so rewards give no gradient: the entropy
            # bonus does, and that is enough to show the weights train and reach the engine
            "algo.entropy_coef=0.01",
            "train.eval_every=0",
            "train.eval_k=1",
            "task.eval_size=4",
            "rollout.batch_size=8",
            "rollout.group_size=4",
            "rollout.max_new_tokens=12",
            "train.micro_batch_size=4",
            "rollout.vllm.enforce_eager=true",  # vLLM: seconds to start instead of a minute
            f"log.run_dir={run_dir}",
            "log.name=run",
            "log.quiet=true",
            *overrides,
        ]
    )
    run = run_dir / "run"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return run, [m for m in metrics if "loss" in m]


@pytest.mark.parametrize("engine", ["hf", VLLM])
@pytest.mark.parametrize("task", list(TASKS))
def test_rlvr_train_trains_a_local_qwen2(qwen2_dir, tmp_path, engine, task):
    run, steps = train(
        qwen2_dir, tmp_path, f"task.name={task}", f"rollout.engine={engine}", *TASKS[task]
    )
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        assert all(torch.isfinite(torch.tensor(m[k])) for k in ("loss", "grad_norm"))
        assert m["time/weight_sync"] >= 0
        # the engine sampled what the trainer scores: only kernels' float noise between them
        assert m["mismatch/abs_diff_max"] < 1e-3
    base = AutoModelForCausalLM.from_pretrained(qwen2_dir)
    final = AutoModelForCausalLM.from_pretrained(run / "final")
    moved = [
        (final.state_dict()[name] - weight).abs().max() > 0
        for name, weight in base.state_dict().items()
    ]
    assert sum(moved) > len(moved) // 2  # full fine-tuning moved most tensors


@pytest.mark.parametrize("engine", ["hf", VLLM])
def test_lora_trains_only_the_adapters_of_a_local_qwen2(qwen2_dir, tmp_path, engine):
    run, steps = train(
        qwen2_dir, tmp_path, "task.name=arithmetic", f"rollout.engine={engine}", "model.lora.r=4"
    )
    assert all(m["mismatch/abs_diff_max"] < 1e-3 for m in steps)
    checkpoint = load_file(next((run / "checkpoints").glob("step-*")) / "adapter.safetensors")
    assert checkpoint and all("lora_" in name for name in checkpoint)
    assert (run / "final" / "adapter" / "adapter_config.json").is_file()
    base = AutoModelForCausalLM.from_pretrained(qwen2_dir)
    merged = AutoModelForCausalLM.from_pretrained(run / "final")
    assert not torch.equal(
        merged.model.layers[0].self_attn.q_proj.weight, base.model.layers[0].self_attn.q_proj.weight
    )
    assert torch.equal(merged.model.embed_tokens.weight, base.model.embed_tokens.weight)


@pytest.mark.parametrize("engine", ["hf", VLLM])
def test_rlvr_eval_scores_a_local_qwen2_with_each_engine(qwen2_dir, engine, capsys):
    main(
        [
            "eval", str(qwen2_dir), "--task", "arithmetic", "task.eval_size=4", "train.eval_k=2",
            "rollout.max_new_tokens=8", f"rollout.engine={engine}",
            "rollout.vllm.enforce_eager=true",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out  # vLLM's log lines come first; the metrics are the last JSON
    metrics = json.loads(out[out.rindex("\n{\n") if "\n{\n" in out else out.index("{") :])
    assert {"eval/accuracy", "eval/pass@1", "eval/pass@2"} <= set(metrics)
