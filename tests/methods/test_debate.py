"""MADA-RL debates: role configs, what a debate refuses, the correction metrics by hand, and a
short run of a generator and a critic on one base that resumes exactly."""

import json
import math

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.methods.debate import Debate, check_debate, correction_metrics, role_configs
from rlvr.train.checkpoint import COMPLETE

DEBATE = ["debate.rounds=2", "model.lora.r=4"]


def test_role_configs_give_the_critic_its_overrides_and_the_counterfactual_baseline(tmp_path):
    cfg = load_config(None, [*DEBATE, 'debate.critic={"algo.advantage": "counterfactual", '
                              '"train.lr": 0.01, "model.lora.r": 2}'])  # fmt: skip
    generator, critic = role_configs(cfg, tmp_path)
    assert generator.algo.advantage == "grpo" and critic.algo.advantage == "counterfactual"
    assert (generator.train.lr, critic.train.lr) == (cfg.train.lr, 0.01)
    assert (generator.model.lora.r, critic.model.lora.r) == (4, 2)
    assert (generator.log.name, critic.log.name) == ("generator", "critic")
    assert critic.log.run_dir == str(tmp_path)
    assert role_configs(load_config(None, DEBATE), tmp_path)[1].algo.advantage == "counterfactual"


@pytest.mark.parametrize(
    ("critic", "message"),
    [
        ('{"task.digits": 4}', "cannot differ for the critic"),
        ('{"model.preset": "small"}', "cannot differ for the critic"),
        ('{"train.steps": 3}', "cannot differ for the critic"),
        ('{"algo.clip_hihg": 0.3}', r"debate \(critic\)"),
    ],
)
def test_role_configs_refuse_what_the_roles_must_share(tmp_path, critic, message):
    with pytest.raises(ConfigError, match=message):
        role_configs(load_config(None, [*DEBATE, f"debate.critic={critic}"]), tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.lora.r=0"], "model.lora.r > 0"),
        (["debate.shown=9"], "debate.shown <= rollout.group_size"),
        (
            ["algo.advantage=counterfactual"],
            "a generator whose advantage needs no critic's baseline",
        ),
        (["task.name=guess_number"], "multi-turn"),
        (["task.name=countdown"], "debate.show = 'replies'"),
        (['debate.critic={"algo.dynamic_sampling": true}'], "critic without algo.dynamic_sampling"),
    ],
)
def test_check_debate_refuses_what_could_not_run(tmp_path, overrides, message):
    cfg = load_config(None, [*DEBATE, *overrides])
    with pytest.raises(ConfigError, match=message):
        check_debate(cfg, *role_configs(cfg, tmp_path))


def test_counterfactual_and_a_single_round_need_a_debate():
    with pytest.raises(ConfigError, match="set debate.rounds = 2"):
        load_config(None, ["algo.advantage=counterfactual"])
    with pytest.raises(ConfigError, match="debate.rounds = 1 is the generator alone"):
        load_config(None, ["debate.rounds=1"])


def test_correction_metrics_by_hand():
    # 3 problems: shown generator accuracy 1/3 (wrong consensus), 1 (right), 2/3 (right);
    # the critic's answers per problem
    shown = [1 / 3, 1.0, 2 / 3]
    critic = [[True, False], [True, True], [False, False]]
    m = correction_metrics(shown, critic, "d/")
    assert m["d/generator_accuracy"] == pytest.approx(2 / 3)
    assert m["d/critic_accuracy"] == pytest.approx(3 / 6)
    assert m["d/fixed"] == pytest.approx(1 / 2)  # right on half of the wrong-consensus answers
    assert m["d/kept"] == pytest.approx(2 / 4)
    assert m["d/wrong_consensus"] == pytest.approx(1 / 3)
    assert math.isnan(correction_metrics([1.0], [[True]], "d/")["d/fixed"])  # nothing to fix


def test_debate_trains_both_adapters_on_one_base_and_resumes_exactly(
    tmp_path, rlvr_home, monkeypatch
):
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    overrides = [
        "task.name=target_string", "task.target=hello", "task.decoy=world",
        "model.pretrain_steps=40", "model.pretrain_flawed_share=0.3", *DEBATE,
        "debate.show=replies", "rollout.batch_size=16", "rollout.group_size=4",
        "rollout.max_new_tokens=8", "train.steps=2", "train.save_every=1", "train.eval_every=1",
        "train.lr=0.01", "task.eval_size=8", "train.eval_k=1", f"log.run_dir={tmp_path}",
        "log.name=d", "log.quiet=true",
    ]  # fmt: skip
    debate = Debate(load_config(None, overrides))
    assert debate.critic.model is debate.generator.model  # one base, two adapters
    engine = debate.generator.source.evaluator.engine
    seen, generate = [], engine.generate
    monkeypatch.setattr(engine, "generate", lambda p, params, seeds=None: (
        seen.append(seeds), generate(p, params, seeds))[1])  # fmt: skip
    first = debate.evaluate()
    debate.generator.state["step"] = 7  # every eval samples the same draws, whatever the step
    assert debate.evaluate() == first and seen[: len(seen) // 2] == seen[len(seen) // 2 :]
    debate.generator.state["step"] = 0
    monkeypatch.setattr(engine, "generate", generate)
    base = {n: p.detach().clone() for n, p in debate.model.named_parameters() if "lora_" not in n}
    summary = debate.run()
    trained = dict(debate.model.named_parameters())
    assert all(p.equal(trained[n]) for n, p in base.items())  # the base stayed frozen
    for adapter in ("default", "critic"):  # each adapter moved off its zero-initialised B
        assert any(p.abs().sum() > 0 for n, p in trained.items() if f"lora_B.{adapter}." in n)
    assert summary["steps"] == 2 and set(summary["roles"]) == {"generator", "critic"}
    log = [json.loads(x) for x in (tmp_path / "d" / "debate.jsonl").open()]
    assert [r["step"] for r in log] == [0, 1, 2, 2]
    assert "debate/eval_fixed" in log[0] and "debate/eval_fixed" in log[-1]

    def critic_steps():
        lines = (tmp_path / "d" / "critic" / "metrics.jsonl").open()
        return [r for r in map(json.loads, lines) if "debate/critic_accuracy" in r]

    steps = critic_steps()
    assert len(steps) == 2
    for record in steps:  # the critic trained on the rewards of its own rounds
        assert record["accuracy"] == pytest.approx(record["debate/critic_accuracy"])
    # a kill between the roles' saves: the critic lost its step-2 checkpoint; the resume goes
    # on from step 1 for both and lands on the same step-2 records
    for path in (tmp_path / "d" / "critic" / "checkpoints").glob("step-000002"):
        (path / COMPLETE).unlink()
    (tmp_path / "d" / "summary.json").unlink()
    resumed = Debate(load_config(None, overrides), resume=tmp_path / "d")
    assert [resumed.generator.state["step"], resumed.critic.state["step"]] == [1, 1]
    resumed.run()
    again = critic_steps()
    for key in ("reward", "accuracy", "loss", "debate/fixed"):
        assert again[-1][key] == pytest.approx(steps[-1][key], abs=1e-9)
