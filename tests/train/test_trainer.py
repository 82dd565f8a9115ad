import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.algos.losses import LOSSES, LossOutput
from rlvr.config import load_config
from rlvr.rewards import REWARDS
from rlvr.train.trainer import Trainer
from rlvr.types import Score


def metrics_by_step(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in records if "loss" in r}


def test_run_directory_layout(fast_overrides, tmp_path):
    cfg = load_config(
        None, fast_overrides + ["train.steps=3", "log.name=layout", "log.report=true"]
    )
    summary = Trainer(cfg).run()
    run = tmp_path / "runs" / "layout"
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "report.png", "report.html"):
        assert (run / name).is_file(), name
    assert json.loads((run / "summary.json").read_text())["steps"] == 3
    assert set(summary["base_eval"]) >= {"eval/accuracy", "eval/pass@1", "eval/pass@2"}
    assert len(metrics_by_step(run)) == 3
    AutoTokenizer.from_pretrained(run / "final")
    AutoModelForCausalLM.from_pretrained(run / "final")
    record = metrics_by_step(run)[1]
    for key in (
        "reward",
        "reward_std",
        "accuracy",
        "entropy",
        "clip_frac",
        "response_length",
        "grad_norm",
        "lr",
        "time/generate",
        "time/env",
        "time/update",
        "tokens_per_sec/generate",
    ):
        assert key in record, key
    # samples.jsonl: the first 8 samples of each step, two whole groups of 4, each with its
    # GRPO advantage, which sums to 0 over a group and follows reward minus the group's mean
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1] * 8 + [2] * 8 + [3] * 8
    for step in (1, 2, 3):
        for group in {s["group"] for s in samples if s["step"] == step}:
            members = [s for s in samples if s["step"] == step and s["group"] == group]
            assert len(members) == 4
            assert sum(s["advantage"] for s in members) == pytest.approx(0.0, abs=1e-5)
            mean = sum(s["reward"] for s in members) / 4
            for s in members:
                assert (s["advantage"] > 1e-6) == (s["reward"] > mean + 1e-9)
                assert s["prompt"][-1]["role"] == "user" and s["status"] in ("ok", "wrong")


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")


@pytest.mark.parametrize(
    "lora",
    [
        [],
        ["model.lora.r=4", "model.lora.dropout=0.1", "train.lr=1e-3"],
        # 3PO: the weight draws follow IVON's Hessian estimate, which the checkpoint keeps
        [
            "model.lora.r=4",
            "train.lr=0.05",
            "methods.c3po.weight_samples=2",
            "algo.tis=sequence_mask",
        ],
    ],
    ids=["full", "lora", "c3po"],
)
def test_interrupted_and_resumed_run_equals_uninterrupted(
    fast_overrides, tmp_path, monkeypatch, lora
):
    if "methods.c3po.weight_samples=2" in lora:
        pytest.importorskip("ivon")
    monkeypatch.setitem(
        REWARDS, "parity", parity
    )  # varies within groups, so every step moves the model
    base = fast_overrides + [
        "train.steps=4",
        "train.save_every=2",
        "algo.kl_coef=0.05",
        "algo.ppo_epochs=2",
        "task.rewards={parity: 1.0}",
        *lora,
    ]
    straight = Trainer(load_config(None, base + ["log.name=straight"]))
    straight.run()

    crashing = Trainer(load_config(None, base + ["log.name=crashed"]))
    real_step, calls = Trainer.step, {"n": 0}

    def step_then_crash(self):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated crash after the step-2 checkpoint")
        return real_step(self)

    monkeypatch.setattr(Trainer, "step", step_then_crash)
    with pytest.raises(KeyboardInterrupt):
        crashing.run()
    monkeypatch.setattr(Trainer, "step", real_step)
    resumed = Trainer(
        load_config(None, base + ["log.name=crashed"]), resume=tmp_path / "runs" / "crashed"
    )
    assert resumed.state["step"] == 2
    resumed.run()

    a, b = (
        metrics_by_step(tmp_path / "runs" / "straight"),
        metrics_by_step(tmp_path / "runs" / "crashed"),
    )
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert a[step]["response_length"] == b[step]["response_length"]
        assert a[step]["reward"] == b[step]["reward"]
        for key in ("loss", "kl", "entropy"):
            assert abs(a[step][key] - b[step][key]) < 1e-6, (step, key)
    assert all(a[step]["grad_norm"] > 0 for step in a)
    if (
        "methods.c3po.weight_samples=2" in lora
    ):  # the replies came from weights off the trained ones
        assert all(a[s]["mismatch/abs_diff_mean"] > 1e-4 for s in a)
        assert all(
            a[s]["rollout/weight_sigma_median"] == b[s]["rollout/weight_sigma_median"] for s in a
        )
    for p, q in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(p, q)
    saved = {p.name for p in (tmp_path / "runs" / "crashed" / "checkpoints").glob("*/*")}
    assert saved == {
        "COMPLETE",
        "trainer.pt",
        "adapter.safetensors" if lora else "model.safetensors",
    }
    final = tmp_path / "runs" / "crashed" / "final"
    assert (final / "adapter" / "adapter_config.json").is_file() == bool(lora)
    AutoModelForCausalLM.from_pretrained(final)  # merged: a plain model either way


def test_a_reward_that_raises_does_not_stop_training(fast_overrides, monkeypatch):
    def flaky(problem, response):
        if len(response) % 3 == 0:
            raise RuntimeError("verifier bug")
        return Score(1.0, "ok")

    monkeypatch.setitem(REWARDS, "flaky", flaky)
    cfg = load_config(None, fast_overrides + ["train.steps=3", "task.rewards={flaky: 1.0}"])
    trainer = Trainer(cfg)
    trainer.run()
    records = list(metrics_by_step(trainer.run_dir.path).values())
    assert len(records) == 3
    assert sum(r["status/crash"] for r in records) > 0


def test_infra_errors_leave_their_group_and_an_all_infra_step_does_not_update(
    fast_overrides, monkeypatch
):
    def judge_down(problem, response):  # odd-length replies lose their judge
        return Score(0.0, "infra_error") if len(response) % 2 else Score(1.0, "ok")

    monkeypatch.setitem(REWARDS, "judge_down", judge_down)
    trainer = Trainer(load_config(None, fast_overrides + ["task.rewards={judge_down: 1.0}"]))
    trajectories, _, metrics = trainer.rollout({})
    assert metrics["sampling/infra_excluded"] > 0
    assert len(trajectories) == 16 - metrics["sampling/infra_excluded"]
    assert all(t.status != "infra_error" and len(t.response_text) % 2 == 0 for t in trajectories)

    monkeypatch.setitem(REWARDS, "judge_down", lambda problem, response: Score(0.0, "infra_error"))
    trainer = Trainer(load_config(None, fast_overrides + ["task.rewards={judge_down: 1.0}"]))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.step()
    assert metrics["sampling/infra_excluded"] == 16 and metrics["skipped_updates"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_non_finite_losses_skip_then_abort(fast_overrides, monkeypatch):
    def nan_loss(inputs, algo):
        return LossOutput((inputs.logprobs * float("nan")).sum())

    monkeypatch.setitem(LOSSES, "nan", nan_loss)
    cfg = load_config(
        None, fast_overrides + ["train.steps=10", "algo.loss=nan", "train.max_bad_steps=2"]
    )
    trainer = Trainer(cfg)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(RuntimeError, match="non-finite"):
        trainer.run()
    assert trainer.state["step"] == 2
    assert all(torch.equal(p, q) for p, q in zip(before, trainer.model.parameters()))


def test_any_hugging_face_model_directory_trains(fast_overrides, tmp_path):
    """A non-tiny model goes through AutoModelForCausalLM / AutoTokenizer: here a Qwen2 with a
    system-prompt template, saved the way a hub snapshot is."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlvr.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    model_dir = tmp_path / "qwen2-mini"
    Qwen2ForCausalLM(config).save_pretrained(model_dir)
    tokenizer.chat_template = (
        "{{ '<|system|>Answer briefly.<|end|>' }}{% for m in messages %}"
        "{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
    )
    tokenizer.save_pretrained(model_dir)
    cfg = load_config(
        None,
        fast_overrides + [f"model.name={model_dir}", "train.steps=2", "task.rewards={parity: 1.0}"],
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(REWARDS, "parity", parity)
        trainer = Trainer(cfg)
        assert type(trainer.model).__name__ == "Qwen2ForCausalLM"
        before = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.run()
    assert any(not torch.equal(p, q) for p, q in zip(before, trainer.model.parameters()))


def test_otb_runs_the_old_logprob_pass_and_gets_sum_pi_squared(fast_overrides, monkeypatch):
    from rlvr.algos.advantages import ADVANTAGES

    seen = {}
    original = ADVANTAGES["otb"]

    def spy(inputs, algo):
        seen.update(old=inputs.old_logprobs, squares=inputs.sum_pi_squared)
        return original(inputs, algo)

    spy.requires, spy.min_group_size = original.requires, original.min_group_size
    monkeypatch.setitem(ADVANTAGES, "otb", spy)
    trainer = Trainer(load_config(None, fast_overrides + ["train.steps=1", "algo.advantage=otb"]))
    trainer.run()
    assert trainer.run_dir.read_metrics() and seen["old"] is not None  # one RL step ran
    squares = seen["squares"]
    assert squares.shape == seen["old"].shape and (squares > 0).any() and (squares <= 1).all()


def test_a_held_out_set_smaller_than_eval_size_is_said(fast_overrides, tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+{i}=", "answer": "{2 * i}"}}\n' for i in range(20)))
    overrides = [f"task.path={data}", "task.eval_share=0.2", "task.verifier=numeric"]
    cfg = load_config(None, [*fast_overrides, "task.name=jsonl", *overrides])
    trainer = Trainer(cfg)  # fast_overrides ask for 8 eval problems; 20 rows hold out 4
    trainer.close()
    assert len(trainer.eval_problems) == 4
    assert "task.eval_size = 8, but the task holds out only 4 problems" in capsys.readouterr().err
