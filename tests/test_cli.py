import json
import re
from pathlib import Path

import pytest

from rlvr.cli import main


def test_list_prints_every_registry(capsys):
    main(["list"])
    out = capsys.readouterr().out
    for name in (
        "grpo",
        "ppo_clip",
        "k3",
        "token-mean",
        "numeric",
        "arithmetic",
        "single_turn",
        "nano",
    ):
        assert name in out


def test_config_mistakes_exit_2_with_the_key_and_a_suggestion(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "algo.kl_cof=0.1"])
    assert e.value.code == 2
    assert "algo.kl_coef" in capsys.readouterr().err


def test_missing_model_directory_is_explained(fast_overrides, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", *fast_overrides, "model.name=./no/such/model"])
    assert e.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def test_train_resume_eval_and_pretrain(fast_overrides, tmp_path, capsys):
    main(["train", *fast_overrides, "train.steps=2", "log.name=cli"])
    run = tmp_path / "runs" / "cli"
    main(["train", "--resume", str(run), "train.steps=3", "--quiet"])
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    # as an uninterrupted 3-step run: the 2-step run's final eval gave way to step 3's
    assert [s for s in steps if s > 0] == [1, 2, 3, 3]
    capsys.readouterr()
    main(["eval", str(run / "final"), "--task", "arithmetic", "task.eval_size=4", "train.eval_k=2"])
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["eval/accuracy"] <= 1.0 and "eval/pass@2" in metrics
    # the run directory brings its own task, eval settings and final-eval seeds: the same numbers
    for path in (run, run / "final"):
        main(["eval", str(path)])
        again = json.loads(capsys.readouterr().out)
        final = json.loads((run / "summary.json").read_text())["final_eval"]
        for key in ("eval/accuracy", "eval/pass@1", "eval/pass@2", "eval/response_length"):
            assert again[key] == pytest.approx(final[key], abs=1e-12), key
    with pytest.raises(SystemExit) as e:
        main(["eval", str(tmp_path)])
    assert e.value.code == 2 and "--task" in capsys.readouterr().err
    main(["pretrain", "--task", "countdown", "model.pretrain_steps=3", "--quiet"])
    path = capsys.readouterr().out.strip().splitlines()[-1]
    assert (Path(path) / "config.json").is_file()


def test_eval_checks_prompt_lengths_against_the_models_context(tmp_path, capsys):
    from rlvr.models.tiny import build_model, build_tokenizer

    model_dir = tmp_path / "model"
    tokenizer = build_tokenizer()
    build_model("nano", tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(10)]
    rows.insert(2, {"prompt": "x" * 5000, "answer": "1"})
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(SystemExit) as e:
        main(["eval", str(model_dir), "--task", "jsonl", f"task.path={data}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{data} line 3" in err and "task.long_prompts=skip" in err


def test_profile_prints_each_phase_and_the_cost_model(fast_overrides, capsys):
    main(["profile", *fast_overrides, "algo.kl_coef=0.05", "--steps", "2"])
    out = capsys.readouterr().out
    table = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    for phase in ("rollout", "ref_logprobs", "update", "weight_sync", "unaccounted", "step"):
        assert phase in table
    shares = [float(table[p][2].rstrip("%")) for p in ("rollout", "ref_logprobs", "update")]
    assert all(0 < share < 100 for share in shares)
    assert float(table["update"][3]) > 0  # GFLOP
    assert "GRPO + KL reference" in out and "PPO (critic + reference)" in out
    assert "this config (measured)" in out
    assert re.search(r"trained, [1-9]\d* of them skipped as shared prompts", out)
    assert re.search(r"peak [\d.]+ GFLOP/s \(float32 matmul on \d+ threads\)", out)
