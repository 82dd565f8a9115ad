"""The Python API: train, evaluate and load a run from a notebook, as the CLI does."""

import subprocess
import sys

import pytest

import rlvr
from rlvr.config import ConfigError, load_config


def test_run_load_and_evaluate(fast_overrides, tmp_path):
    summary = rlvr.run(None, *fast_overrides, "train.steps=2", "log.name=api")
    assert callable(rlvr.run)  # still the function after the training package was imported
    run = rlvr.load_run(tmp_path / "runs" / "api")
    assert run.summary == summary and run.config.train.steps == 2
    assert [r["step"] for r in run.metrics if "loss" in r] == [1, 2]
    assert {s["step"] for s in run.samples} == {1, 2}
    model, tokenizer = run.model()
    assert model.config.vocab_size == len(tokenizer)
    # the run's own config and final-eval seeds: the numbers of its summary
    again = rlvr.evaluate(run.path)
    for key in ("eval/accuracy", "eval/pass@1", "eval/pass@2"):
        assert again[key] == pytest.approx(summary["final_eval"][key], abs=1e-12)
    other = rlvr.evaluate(run.path / "final", "task.eval_size=4", task="arithmetic")
    assert 0.0 <= other["eval/accuracy"] <= 1.0
    with pytest.raises(ConfigError, match="task=<name>"):
        rlvr.evaluate(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        rlvr.load_run(tmp_path)


def test_run_takes_a_dict_or_config_with_overrides(fast_overrides, tmp_path):
    cfg = load_config(None, fast_overrides).model_dump(mode="json")
    cfg["train"]["steps"] = 1
    summary = rlvr.run(cfg, "log.name=from_dict", "train.eval_k=1")
    assert summary["steps"] == 1 and "eval/pass@2" not in summary["final_eval"]  # eval_k=1
    assert rlvr.load_run(tmp_path / "runs" / "from_dict").config.train.eval_k == 1


def test_importing_rlvr_imports_no_torch():
    code = "import sys, rlvr; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
