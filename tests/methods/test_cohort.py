"""Co-RL cohorts: member configs, what a cohort refuses, peer rescoring by hand, and a short
two-member run whose rewards are agreement with the neighbour's majority."""

import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.methods.cohort import Cohort, check_cohort, member_configs, rescore
from rlvr.train.checkpoint import COMPLETE
from rlvr.types import Problem, Trajectory

MEMBERS = 'cohort.members=[{}, {"train.seed": 1, "model.pretrain_flawed_share": 0.6}]'


def test_member_configs_apply_each_members_overrides(tmp_path):
    cfg = load_config(None, [MEMBERS, "train.lr=0.001"])
    first, second = member_configs(cfg, tmp_path)
    assert (first.train.seed, second.train.seed) == (0, 1)
    assert second.model.pretrain_flawed_share == 0.6 and second.train.lr == 0.001
    assert second.log.run_dir == str(tmp_path) and second.log.name == "member-1"
    assert not second.cohort.members  # a member is an ordinary run


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ('[{}, {"task.max_value": 9}]', "must be the same for every member"),
        ('[{}, {"train.seeed": 1}]', "cohort.members[1]: invalid config"),
        ('[{}, {"seed": 1}]', "not a dotted key"),
    ],
)
def test_member_configs_refuse_bad_overrides(tmp_path, members, message):
    cfg = load_config(None, [f"cohort.members={members}"])
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        member_configs(cfg, tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["cohort.members=[{}]"], "has 1"),
        ([MEMBERS, "algo.dynamic_sampling=true"], "algo.dynamic_sampling reads"),
        ([MEMBERS, "task.rewards={numeric: 1.0, format: 0.1}"], "task.rewards reads"),
        ([MEMBERS, "task.name=guess_number"], "scores itself as an environment"),
    ],
)
def test_check_cohort_refuses_what_would_read_labels(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_cohort(load_config(None, overrides))
    check_cohort(load_config(None, [*overrides, "cohort.reward=label", "cohort.members=[{}, {}]"]))


def _samples(replies, labels_right, group_size=3):
    problems = [Problem(id=f"p{g}", prompt="q", answer="a") for g in range(2)]
    return [
        Trajectory(
            problems[i // group_size],
            i // group_size,
            i % group_size,
            [1, 2],
            [0, 1],
            [0.0, -1.0],
            [0.5],
            [2],
            correct=right,
            response_text=reply,
        )  # fmt: skip
        for i, (reply, right) in enumerate(zip(replies, labels_right))
    ]


def test_rescore_pays_agreement_with_the_neighbours_majority():
    # member 0 votes 'x' on p0 and 'y' on p1; member 1 votes 'x' on p0 and 'z' on p1
    a = _samples(["x", "x", "y", "y", "y", "z"], [1, 1, 0, 0, 0, 1])
    b = _samples(["x", "y", "x", "z", "z", None], [1, 0, 1, 0, 0, 0])
    metrics = rescore([a, b], [[t.response_text or None for t in s] for s in (a, b)], "peer")
    # member 0 reads member 1's majorities (ring: 0 <- 1 <- 0): x on p0, z on p1
    assert [t.reward for t in a] == [1, 1, 0, 0, 0, 1]
    # member 1 reads member 0's: x on p0, y on p1
    assert [t.reward for t in b] == [1, 0, 1, 0, 0, 0]
    assert metrics[0]["cohort/agreement"] == pytest.approx(3 / 6)
    # member 1's labels: x (right: a correct sample said it), z (no sample saying z was right)
    assert metrics[0]["cohort/label_accuracy"] == 0.5
    assert metrics[1]["cohort/label_accuracy"] == 0.5  # x right, y wrong
    assert metrics[0]["cohort/majority_accuracy"] == 0.5
    # majorities (x, y) vs (x, z): p_o = 1/2, chance p_e = 0.5 * 0.5 (on x), kappa = 0.25 / 0.75
    assert metrics[0]["cohort/kappa"] == pytest.approx(1 / 3)


def test_rescore_self_and_label_modes():
    a = _samples(["x", "x", "y", "y", "y", "z"], [1, 1, 0, 0, 0, 1])
    rescore([a], [[t.response_text for t in a]], "self")
    assert [t.reward for t in a] == [1, 1, 0, 1, 1, 0]
    b = _samples(["x", "x", "y", "y", "y", "z"], [1, 1, 0, 0, 0, 1])
    metrics = rescore([b, b], [[t.response_text for t in b]] * 2, "label")
    assert [t.reward for t in b] == [0.5] * 6 and metrics[0]["cohort/agreement"] == 4 / 6


def test_rescore_refuses_members_on_different_problems():
    a, b = _samples(["x"] * 6, [1] * 6), _samples(["x"] * 6, [1] * 6)
    b[0].problem = Problem(id="other", prompt="q", answer="a")
    with pytest.raises(RuntimeError, match="different problems"):
        rescore([a, b], [["x"] * 6] * 2, "peer")


def test_cohort_run_rewards_agreement_and_resumes(tmp_path):
    overrides = [
        "task.name=target_string", "task.target=hello", "task.decoy=world",
        "model.preset=nano", "model.pretrain_steps=40", "model.pretrain_flawed_share=0.3",
        "rollout.batch_size=16", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "train.steps=2", "train.save_every=1", "train.eval_every=0", "task.eval_size=8",
        "train.eval_k=1", f"log.run_dir={tmp_path}", "log.name=co", "log.quiet=true",
        # member 1 reads the same problems reworded (Co-RL's paraphrase knob)
        'cohort.members=[{}, {"train.seed": 1, "model.pretrain_flawed_share": 0.7, '
        '"task.paraphrase": true}]',
    ]  # fmt: skip
    cohort = Cohort(load_config(None, overrides))
    plain, reworded = (m.eval_problems[0] for m in cohort.members)
    assert plain.id == reworded.id and plain.answer == reworded.answer
    assert plain.prompt.startswith("Say the word") and not reworded.prompt.startswith("Say")
    summary = cohort.run()
    assert summary["steps"] == 2 and len(summary["members"]) == 2
    lines = [
        [json.loads(x) for x in (tmp_path / "co" / f"member-{i}" / "metrics.jsonl").open()]
        for i in range(2)
    ]
    steps = [[r for r in member if "cohort/agreement" in r] for member in lines]
    assert [len(s) for s in steps] == [2, 2]
    for member in steps:  # the reward trained on is exactly the agreement with the peer
        for record in member:
            assert record["reward"] == pytest.approx(record["cohort/agreement"])
    # a kill between members' saves: member 1 lost its step-2 checkpoint; the resume goes on
    # from step 1 for both and lands on the same step-2 records
    checkpoints = tmp_path / "co" / "member-1" / "checkpoints"
    for path in checkpoints.glob("step-000002"):
        (path / COMPLETE).unlink()
    (tmp_path / "co" / "summary.json").unlink()
    cfg = load_config(None, [*overrides, "train.steps=2"])
    resumed = Cohort(cfg, resume=tmp_path / "co")
    assert [m.state["step"] for m in resumed.members] == [1, 1]
    resumed.run()
    again = [
        [json.loads(x) for x in (tmp_path / "co" / f"member-{i}" / "metrics.jsonl").open()]
        for i in range(2)
    ]
    again = [[r for r in member if "cohort/agreement" in r] for member in again]
    for before, after in zip(steps, again):
        for key in ("reward", "accuracy", "entropy/sequence", "loss"):
            assert after[-1][key] == pytest.approx(before[-1][key], abs=1e-9)


def test_lora_members_on_one_base_share_it_and_train_their_own_adapters(
    tmp_path, rlvr_home, monkeypatch
):
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    overrides = [
        "task.name=target_string", "task.target=hello", "task.decoy=world",
        "model.pretrain_steps=40", "model.pretrain_flawed_share=0.3", "model.lora.r=4",
        "rollout.batch_size=16", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "train.steps=2", "train.eval_every=0", "train.lr=0.01", "task.eval_size=8",
        "train.eval_k=1", f"log.run_dir={tmp_path}", "log.name=co", "log.quiet=true",
        # members 0 and 1 are adapters on one warm start; member 2 trains all its own weights
        'cohort.members=[{}, {"train.lr": 0.02}, {"model.lora.r": 0}]',
    ]  # fmt: skip
    cohort = Cohort(load_config(None, overrides))
    first, second, third = (m.model for m in cohort.members)
    assert second is first and third is not first
    assert cohort.adapters == ["default", "member-1", None]
    base = {n: p.detach().clone() for n, p in first.named_parameters() if "lora_" not in n}
    cohort.run()
    trained = dict(first.named_parameters())
    assert all(p.equal(trained[n]) for n, p in base.items())  # the shared base stayed frozen
    for adapter in ("default", "member-1"):  # each member trained its own adapter
        assert any(p.abs().sum() > 0 for n, p in trained.items() if f"lora_B.{adapter}." in n)
    for index in range(2):  # each member's final model is its own adapter merged on the base
        final = tmp_path / "co" / f"member-{index}" / "final" / "adapter" / "adapter_config.json"
        assert final.is_file()
    assert not (tmp_path / "co" / "member-2" / "final" / "adapter").exists()
