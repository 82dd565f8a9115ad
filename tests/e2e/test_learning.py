"""A whole run, warm start included: RL must visibly improve the tiny model."""

import json
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.xdist_group("digits2")  # with the Ray tests, on its warm start
def test_grpo_fixes_the_warm_started_models_mistake(rlvr_home, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    cfg = load_config(
        None,
        [
            "task.digits=2",
            "model.pretrain_steps=400",
            "model.pretrain_batch_size=64",
            "rollout.batch_size=64",
            "rollout.max_new_tokens=32",
            "train.steps=12",
            "task.eval_size=64",
            "train.eval_every=6",
            f"log.run_dir={tmp_path}",
            "log.name=e2e",
            "log.quiet=true",
        ],
    )
    summary = Trainer(cfg).run()
    base, final = summary["base_eval"], summary["final_eval"]
    assert base["eval/accuracy"] <= 0.6  # the flawed demonstrations dominate greedy decoding
    assert final["eval/accuracy"] >= base["eval/accuracy"] + 0.25
    assert final["eval/pass@1"] > base["eval/pass@1"]
    records = [
        json.loads(line) for line in (tmp_path / "e2e" / "metrics.jsonl").read_text().splitlines()
    ]
    assert len([r for r in records if "reward" in r]) == 12


@pytest.mark.xdist_group("digits2")
def test_ppo_with_a_critic_learns_the_same_task(rlvr_home, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))  # reuses the warm start of the test above
    cfg = load_config(ROOT / "examples" / "recipes" / "ppo.toml", [
        "task.digits=2", "model.pretrain_steps=400", "model.pretrain_batch_size=64", "rollout.batch_size=64", "rollout.max_new_tokens=32",
        "train.steps=12", "task.eval_size=64", "train.eval_every=6", f"log.run_dir={tmp_path}",
        "log.quiet=true", "algo.critic_warmup_steps=2",
    ])  # fmt: skip
    summary = Trainer(cfg).run()
    assert summary["final_eval"]["eval/accuracy"] >= summary["base_eval"]["eval/accuracy"] + 0.25


def test_grpo_learns_the_multi_turn_guessing_game(rlvr_home, tmp_path, monkeypatch):
    """Warm-started on a mix of binary search and a linear scan that runs out of guesses, the
    tiny model must win more games, in fewer turns, after a few RL steps. The game is the
    example's at half size (1-8 in 4 guesses), whose shorter episodes halve the warm start:
    greedy 0.5 -> 1.0 and 3.25 -> 2.6 turns here, as after 300 warm-start steps (150 gave
    0.5 -> 0.75, too close to the bar)."""
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    cfg = load_config(ROOT / "examples" / "guess_number.toml", [
        "task.max_number=8", "task.max_guesses=4", "rollout.max_turns=4",
        "model.pretrain_steps=200", "model.pretrain_batch_size=32", "train.steps=12",
        "train.eval_every=0",
        f"log.run_dir={tmp_path}", "log.quiet=true",
    ])  # fmt: skip
    summary = Trainer(cfg).run()
    base, final = summary["base_eval"], summary["final_eval"]
    assert final["eval/accuracy"] >= base["eval/accuracy"] + 0.2
    assert final["eval/turns"] < base["eval/turns"]
