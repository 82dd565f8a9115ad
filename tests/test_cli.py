import json
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
    assert [s for s in steps if s > 0] == [
        1,
        2,
        2,
        3,
        3,
    ]  # step 2 and 3 carry a final eval record too
    capsys.readouterr()
    main(["eval", str(run / "final"), "--task", "arithmetic", "task.eval_size=4", "train.eval_k=2"])
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["eval/accuracy"] <= 1.0 and "eval/pass@2" in metrics
    main(["pretrain", "--task", "countdown", "model.pretrain_steps=3", "--quiet"])
    path = capsys.readouterr().out.strip().splitlines()[-1]
    assert (Path(path) / "config.json").is_file()
