"""Parason through the trainer: a correct reply whose thread tree shortens its critical path
earns the capped acceleration bonus on the reward the advantages read; others earn nothing.
Dispatched threads train on the context they were sampled from, with their episode's advantage."""

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.rollout.engine import Completion
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer

# product_sum's tokenizer spells each tag as one token and every other character as one
SHORT = (  # 6 + 2 + 3 + 3 + 1 + 6 + 4 + 1 + 6 = 32 tokens, 28 on the path: acceleration 8/7
    "sum is<Parallel><Outlines><Subtask>x</Subtask><Subtask>y</Subtask></Outlines>"
    "<Thread>1234</Thread><Thread>12</Thread></Parallel>#### 7"
)
LONG = (  # 9 + 11 + 11 + 1 = 32 tokens, 21 on the path: acceleration 32/21, over the cap
    "<Parallel><Outlines><Subtask>x</Subtask><Subtask>y</Subtask></Outlines>"
    "<Thread>123456789</Thread><Thread>987654321</Thread></Parallel>"
)
SEQUENTIAL = "12+34 = 46 #### 46"
TRIALS = (  # 9 + 6 + 4 + 1 + 6 = 26 tokens, 10 in trial threads
    "<Parallel><Outlines><Trial>x</Trial><Trial>y</Trial></Outlines>"
    "<Thread>1234</Thread><Thread>12</Thread></Parallel>#### 7"
)
MIXED = TRIALS.replace("<Trial>x</Trial>", "<Subtask>x</Subtask>")  # 4 of 26 in its trial


def spy_rewards(trainer) -> list[torch.Tensor]:
    """The rewards the advantage estimator reads, one tensor per step."""
    original, seen = trainer.components.advantage, []

    def spy(inputs, algo):
        seen.append(inputs.rewards.clone())
        return original(inputs, algo)

    trainer.components.advantage = spy
    return seen


def rewrite_replies(trainer, rewrites, expected, before: list) -> None:
    """The trainer's rollouts answer `rewrites[i % 4]` (reply, correct) by position i in the
    group; `before` collects each one's (reward, expected bonus)."""
    collect = trainer.rollout

    def rewritten_rollout(timings):
        trajectories, baselines, sampling = collect(timings)
        for trajectory in trajectories:
            trajectory.response_text, trajectory.correct = rewrites[trajectory.sample_index % 4]
        before.extend((t.reward, expected[t.sample_index % 4]) for t in trajectories)
        return trajectories, baselines, sampling

    trainer.rollout = rewritten_rollout


def test_correct_parallel_replies_earn_the_capped_acceleration_bonus(fast_overrides):
    # the replies are rewritten below, so the warm start only has to exist
    overrides = ["task.name=product_sum", "task.terms=2", "task.digits=1",
                 "methods.parason.accel_weight=0.5", "methods.parason.accel_cap=0.2", "train.steps=1",
                 "model.pretrain_steps=2"]  # fmt: skip
    trainer = Trainer(load_config(None, fast_overrides + overrides))
    original, seen = trainer.components.advantage, []

    def spy(inputs, algo):
        seen.append(inputs.rewards.clone())
        return original(inputs, algo)

    trainer.components.advantage = spy
    before = []
    # (reply, correct) by position in the group, and each one's expected bonus
    rewrites = [(SHORT, True), (LONG, True), (LONG, False), (SEQUENTIAL, True)]
    expected = [0.5 * (8 / 7 - 1), 0.5 * 0.2, 0.0, 0.0]
    rewrite_replies(trainer, rewrites, expected, before)
    step = trainer.step()
    rewards = torch.tensor([reward + bonus for reward, bonus in before])
    assert torch.allclose(seen[0], rewards.float(), atol=1e-6)
    assert (seen[0] != torch.tensor([reward for reward, _ in before]).float()).sum() == 8
    assert step["parallel/bonus"] == pytest.approx(sum(expected) / 4, abs=1e-6)
    assert step["parallel/acceleration"] == pytest.approx((8 / 7 + 2 * 32 / 21 + 1) / 4)
    assert step["parallel/well_formed"] == 1.0


def test_trial_beta_pays_correct_replies_the_group_zscore_of_their_trial_share(fast_overrides):
    """Shares [10/26, 4/26, 10/26, 0] in every group: mean 6/26, population std sqrt(72)/52, so
    the z-scores are 2 sqrt(2)/3, -sqrt(2)/3, 2 sqrt(2)/3, -sqrt(2); the third is wrong (no bonus)
    but counts in the z-score, as in the paper's reward manager."""
    overrides = ["task.name=product_sum", "task.terms=2", "task.digits=1",
                 "methods.parason.trial_beta=0.1", "train.steps=1", "model.pretrain_steps=2"]  # fmt: skip
    trainer = Trainer(load_config(None, fast_overrides + overrides))
    seen, before = spy_rewards(trainer), []
    rewrites = [(TRIALS, True), (MIXED, True), (TRIALS, False), (SEQUENTIAL, True)]
    expected = [0.1 * 2 * 2**0.5 / 3, -0.1 * 2**0.5 / 3, 0.0, -0.1 * 2**0.5]
    rewrite_replies(trainer, rewrites, expected, before)
    step = trainer.step()
    rewards = torch.tensor([reward + bonus for reward, bonus in before])
    assert torch.allclose(seen[0], rewards.float(), atol=1e-6)
    assert step["parallel/bonus"] == pytest.approx(sum(expected) / 4, abs=1e-6)
    assert step["parallel/trial_ratio"] == pytest.approx((10 + 4 + 10 + 0) / 26 / 4)
    assert step["parallel/subtask_ratio"] == pytest.approx((0 + 6 + 0 + 0) / 26 / 4)


class ScriptedTrace:
    """An Engine that writes one region of two outlines, a thread per dispatched opening and a
    conclusion, each token's logprob the model's own on the exact context it was handed. The
    outlines are `kinds[seed % len(kinds)]` of the reply's sampling seed."""

    def __init__(self, model, tokenizer, kinds=(("Subtask", "Subtask"),)):
        self.model, self.tokenizer, self.kinds = model, tokenizer, kinds

    def generate(self, prompts, params, seeds=None):
        outs = []
        for i, ids in enumerate(prompts):
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            if text.endswith(("<Thread>1:", "<Thread>2:")):
                reply, reason = f"{text[-2] * 3}</Thread>", "stop"
            elif "<Parallel>" not in text:
                a, b = self.kinds[(seeds[i] if seeds else 0) % len(self.kinds)]
                reply = f"<Parallel><Outlines><{a}>a</{a}><{b}>b</{b}></Outlines>"
                reason = "stop"
            else:
                reply, reason = "</Parallel>#### 3", "eos"
            reply_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logits = self.model(torch.tensor([list(ids) + reply_ids])).logits[0]
            chosen = (
                logits[len(ids) - 1 : -1]
                .log_softmax(-1)
                .gather(-1, torch.tensor(reply_ids)[:, None])
            )
            outs.append(Completion(reply_ids, chosen[:, 0].tolist(), reason, reply))
        return outs

    def load_weights(self, model):
        pass

    def release_memory(self):
        pass


def test_dispatched_threads_train_on_their_own_context_with_their_episodes_advantage(
    fast_overrides,
):
    overrides = ["task.name=product_sum", "task.terms=2", "task.digits=1", "train.steps=1",
                 "model.pretrain_steps=2", "methods.parason.dispatch=true",
                 "rollout.max_new_tokens=64"]  # fmt: skip
    trainer = Trainer(load_config(None, fast_overrides + overrides))
    trainer.source.runner.engine.engine = ScriptedTrace(trainer.model, trainer.tokenizer)
    collect, updates = trainer.rollout, []

    def varied_rollout(timings):  # the script is always wrong: reward half of each group
        trajectories, baselines, sampling = collect(timings)
        for trajectory in trajectories:
            trajectory.turn_rewards = [float(trajectory.sample_index % 2)]
        return trajectories, baselines, sampling

    update = trainer.updater.update

    def spy(model, data, *args):
        updates.append(data)
        return update(model, data, *args)

    trainer.rollout, trainer.updater.update = varied_rollout, spy
    step = trainer.step()
    (data,) = updates
    episodes = 16  # fast_overrides' batch
    assert len(data.batch) == 2 * episodes and step["parallel/thread_rows"] == 1.0
    decode = trainer.tokenizer.decode
    for row in range(episodes, 2 * episodes):
        trained = data.batch.input_ids[row, 1:][data.batch.loss_mask[row].bool()]
        assert decode(trained) == "222</Thread>"
        assert decode(data.batch.input_ids[row]).count("<Thread>") == 1  # blind to thread 1
    episode_mask = data.batch.loss_mask[:episodes].bool()
    assert decode(data.batch.input_ids[0, 1:][episode_mask[0]]) == (
        "<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines>"
        "111</Thread></Parallel>#### 3"
    )
    # every trained token, threads included, sees the context it was sampled from: the
    # update's own logprobs equal the ones the script computed on those contexts
    assert step["mismatch/abs_diff_max"] < 1e-5
    for row in range(episodes):
        advantage = data.advantages[row][episode_mask[row]]
        assert advantage.abs().min() > 0.1 and len(advantage.unique()) == 1
        thread = data.advantages[episodes + row][data.batch.loss_mask[episodes + row].bool()]
        assert torch.equal(thread, advantage[: len(thread)])


def test_dispatched_trials_earn_trial_beta_on_their_measured_share(fast_overrides):
    """Dispatched replies of two trials, a trial and a subtask, or two subtasks (by sampling
    seed): each 9 + 7 + 7 + 7 = 30 tokens ("<Thread>k:" is 3, "kkk</Thread>" 4, the ending
    "</Parallel>#### 3" 7), so trial shares 14/30, 7/30, 0; the bonus is 0.1 times the group
    z-score of the share, on correct replies only."""
    overrides = ["task.name=product_sum", "task.terms=2", "task.digits=1", "train.steps=1",
                 "model.pretrain_steps=2", "methods.parason.dispatch=true",
                 "methods.parason.trial_beta=0.1", "rollout.max_new_tokens=64"]  # fmt: skip
    trainer = Trainer(load_config(None, fast_overrides + overrides))
    kinds = (("Trial", "Trial"), ("Subtask", "Trial"), ("Subtask", "Subtask"))
    trainer.source.runner.engine.engine = ScriptedTrace(trainer.model, trainer.tokenizer, kinds)
    seen, collect, sampled = spy_rewards(trainer), trainer.rollout, []

    def graded_rollout(timings):  # odd samples are right, whatever the script wrote
        trajectories, baselines, sampling = collect(timings)
        for trajectory in trajectories:
            trajectory.correct = bool(trajectory.sample_index % 2)
            trajectory.turn_rewards = [float(trajectory.correct)]
        sampled.extend(trajectories)
        return trajectories, baselines, sampling

    trainer.rollout = graded_rollout
    trainer.step()
    share = {2: 14 / 30, 1: 7 / 30, 0: 0.0}
    shares = torch.tensor([share[t.response_text.count("<Trial>")] for t in sampled])
    assert all(t.response_text.count("<Thread>") == 2 for t in sampled)  # both dispatched
    groups = torch.tensor([t.group_id for t in sampled])
    bonus = torch.zeros(len(sampled))
    for g in groups.unique():
        v = shares[groups == g]
        if v.std(correction=0) > 0:
            bonus[groups == g] = 0.1 * (v - v.mean()) / v.std(correction=0)
    correct = torch.tensor([t.correct for t in sampled])
    expected = correct.float() + torch.where(correct, bonus, 0.0)
    assert torch.allclose(seen[0], expected, atol=1e-6)
    assert (expected != correct.float()).sum() >= 4  # some groups mixed their kinds


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["rollout.tree_width=2", "algo.advantage=tree"],
            "does not combine with rollout.tree_width",
        ),
        (["algo.advantage=gae"], "reads per-row values or probes \\('gae'\\)"),
        (["task.name=guess_number"], "multi-turn task \\('guess_number' has its own env\\)"),
    ],
)
def test_dispatch_refuses_what_its_thread_rows_cannot_serve(overrides, message, fast_overrides):
    with pytest.raises(ConfigError, match=message):
        build_components(load_config(None, [*fast_overrides, "methods.parason.dispatch=true",
                                            *overrides]))  # fmt: skip
