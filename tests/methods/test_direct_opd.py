"""Direct-OPD through the trainer: the rewards the advantages read gain, per sampled token, the
teacher's logprob minus the teacher_ref's (or minus the sampler's, for on-policy distillation)."""

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.methods.direct_opd import expected_implicit_reward, implicit_rewards
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer

KEY = "methods.direct_opd"


def test_implicit_rewards_by_hand():
    teacher = torch.tensor([[-0.5, -1.0, -2.0]])
    baseline = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    assert implicit_rewards(teacher, baseline, mask).tolist() == [[0.0, 0.0, -1.5]]


def test_expected_implicit_reward_by_hand():
    student = torch.log(torch.tensor([[[0.5, 0.25], [0.1, 0.2]]]))  # [1, 2 positions, k = 2]
    shift = torch.tensor([[[1.0, -2.0], [3.0, 0.5]]])
    got = expected_implicit_reward(student, shift, reverse_kl=False)
    assert torch.allclose(got, torch.tensor([[0.5 - 0.5, 0.3 + 0.1]]))
    teacher = torch.log(torch.tensor([[[0.25, 0.25], [0.1, 0.4]]]))
    # minus the reverse KL over the k tokens: sum p (log q - log p)
    want = [[0.5 * torch.log(torch.tensor(0.5)), 0.2 * torch.log(torch.tensor(2.0))]]
    got = expected_implicit_reward(student, teacher, reverse_kl=True)
    assert torch.allclose(got, torch.tensor(want))


def _save(path, seed, tokenizer):
    build_model("nano", tokenizer, seed=seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _sequence_logprob(model, trajectory) -> float:
    """log pi(reply | prompt) of one trajectory, from a plain forward of its tokens."""
    ids = torch.tensor([trajectory.token_ids])
    with torch.no_grad():
        logprobs = model(input_ids=ids).logits[0, :-1].log_softmax(-1)
    chosen = logprobs.gather(-1, ids[0, 1:, None]).squeeze(-1)
    return float((chosen * torch.tensor(trajectory.loss_mask[1:])).sum())


def _run_one_step(overrides):
    trainer = Trainer(load_config(None, overrides))
    original, seen, rollouts = trainer.components.advantage, [], []

    def spy(inputs, algo):
        seen.append(inputs.rewards.clone())
        return original(inputs, algo)

    collect = trainer.rollout

    def keep(timings):
        out = collect(timings)
        rollouts.append([(t.reward, t) for t in out[0]])
        return out

    trainer.components.advantage, trainer.rollout = spy, keep
    metrics = trainer.step()
    return trainer, seen[0], rollouts[0], metrics


@pytest.mark.parametrize("with_ref", [True, False])
def test_each_sampled_tokens_implicit_reward_joins_the_reward(fast_overrides, tmp_path, with_ref):
    tokenizer = build_tokenizer()
    teacher, ref = _save(tmp_path / "t", 1, tokenizer), _save(tmp_path / "r", 2, tokenizer)
    keys = [f"{KEY}.teacher={teacher}", f"{KEY}.coef=0.5"]
    if with_ref:
        keys.append(f"{KEY}.teacher_ref={ref}")
    trainer, rewards, rollouts, metrics = _run_one_step([*fast_overrides, "train.steps=1", *keys])
    opd = trainer.methods.chosen["direct_opd"]
    teacher_model = opd.models["teacher"]
    expected = []
    for outcome, t in rollouts:
        if with_ref:
            shift = _sequence_logprob(teacher_model, t) - _sequence_logprob(
                opd.models["teacher_ref"], t
            )
        else:  # against the sampler's own logprobs: on-policy distillation
            shift = _sequence_logprob(teacher_model, t) - sum(t.behaviour_logprobs)
        expected.append(outcome + 0.5 * shift)
    assert torch.allclose(rewards, torch.tensor(expected), atol=1e-3)
    assert metrics["time/teacher_logprobs"] > 0 and metrics["teacher/sequence_reward"] != 0


def _full_logprobs(model, trajectory) -> torch.Tensor:
    """[positions, vocab] log-softmax after each token of one trajectory, from a plain forward."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([trajectory.token_ids])).logits[0, :-1].log_softmax(-1)


def test_top_k_estimator_moves_the_teacher_into_the_loss_and_keys_kl_on_its_sign(
    fast_overrides, tmp_path
):
    tokenizer = build_tokenizer()
    teacher, ref = _save(tmp_path / "t", 1, tokenizer), _save(tmp_path / "r", 2, tokenizer)
    keys = [
        f"{KEY}.teacher={teacher}", f"{KEY}.teacher_ref={ref}", f"{KEY}.top_k=3",
        f"{KEY}.kl_coefs=[0.3, 0.7]", "train.steps=1",
    ]  # fmt: skip
    start = Trainer(load_config(None, [*fast_overrides, *keys])).model  # the pre-update student
    trainer, rewards, rollouts, metrics = _run_one_step([*fast_overrides, *keys])
    # no sampled token's implicit reward joins the rewards: the verifier's alone
    assert torch.equal(rewards, torch.tensor([outcome for outcome, _ in rollouts]))
    # the logged implicit reward is sum over the student's top 3 of pi_s(v) (log pi_t - log pi_r)
    total, tokens = 0.0, 0
    for _, t in rollouts:
        student, mask = _full_logprobs(start, t), torch.tensor(t.loss_mask[1:]).bool()
        opd = trainer.methods.chosen["direct_opd"]
        shift = _full_logprobs(opd.models["teacher"], t) - _full_logprobs(
            opd.models["teacher_ref"], t
        )
        top = student.topk(3, -1)
        per_position = (top.values.exp() * shift.gather(-1, top.indices)).sum(-1)
        total, tokens = total + float(per_position[mask].sum()), tokens + int(mask.sum())
    assert metrics["teacher/token_reward"] == pytest.approx(total / tokens, abs=1e-4)
    # the loss's term was taken at the same (pre-update) student, so it reads the same value
    assert metrics["teacher/expected_reward"] == pytest.approx(total / tokens, abs=1e-4)
    assert metrics["kl_coef"] == (0.7 if total >= 0 else 0.3)


def test_a_teacher_with_another_tokenizer_or_a_lone_teacher_ref_is_refused(
    fast_overrides, tmp_path
):
    other = build_tokenizer()
    other.add_tokens(["<extra>"])
    build_model("nano", build_tokenizer(), seed=1).save_pretrained(tmp_path / "t")
    other.save_pretrained(tmp_path / "t")
    with pytest.raises(ConfigError, match=f"{KEY}.teacher = .* has another tokenizer"):
        Trainer(load_config(None, [*fast_overrides, f"{KEY}.teacher={tmp_path / 't'}"]))
    refused = {
        "but it is not set": [f"{KEY}.domain_teachers={{add: x}}", f"{KEY}.top_k=4"],
        "set exactly one": [f"{KEY}.teacher_ref={tmp_path / 't'}"],
        "takes two coefficients": [f"{KEY}.teacher=t", f"{KEY}.kl_coefs=[0.1]"],
        "rollout.replay's logged replies": [f"{KEY}.teacher=t", "rollout.replay=x.jsonl"],
    }
    for message, keys in refused.items():
        with pytest.raises(ConfigError, match=message):  # before any model is loaded
            build_components(load_config(None, [*fast_overrides, *keys]))


MIX = [
    "task.name=mix",
    "task.domains={add: {name: arithmetic, operations: [add]}, sub: {name: arithmetic, operations: [sub]}}",
]


def test_each_domain_is_distilled_from_its_own_teacher_and_others_from_none(
    fast_overrides, tmp_path
):
    tokenizer = build_tokenizer()
    teacher = _save(tmp_path / "add", 1, tokenizer)
    keys = [*MIX, f"{KEY}.domain_teachers={{add: {teacher}}}", f"{KEY}.coef=0.5"]
    trainer, rewards, rollouts, metrics = _run_one_step([*fast_overrides, "train.steps=1", *keys])
    add_teacher = trainer.methods.chosen["direct_opd"].by_domain["add"]
    expected = [
        outcome + 0.5 * (_sequence_logprob(add_teacher, t) - sum(t.behaviour_logprobs))
        if t.problem.domain == "add"
        else outcome
        for outcome, t in rollouts
    ]
    assert {t.problem.domain for _, t in rollouts} == {"add", "sub"}
    assert torch.allclose(rewards, torch.tensor(expected), atol=1e-3)
    assert metrics["teacher/sequence_reward"] != 0


def test_domain_teachers_must_name_the_tasks_domains_and_replace_a_single_teacher(
    fast_overrides, tmp_path
):
    teacher = _save(tmp_path / "t", 1, build_tokenizer())
    with pytest.raises(ConfigError, match="names mul, which no problem .* add, sub"):
        build_components(
            load_config(None, [*fast_overrides, *MIX, f"{KEY}.domain_teachers={{mul: {teacher}}}"])
        )
    both = [f"{KEY}.domain_teachers={{add: {teacher}}}", f"{KEY}.teacher={teacher}"]
    with pytest.raises(ConfigError, match="set exactly one"):
        build_components(load_config(None, [*fast_overrides, *MIX, *both]))
