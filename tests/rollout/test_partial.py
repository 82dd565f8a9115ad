import copy
import threading

import torch

from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.models.logprobs import token_logprobs
from rlvr.models.tiny import build_model
from rlvr.rollout import EpisodeRunner, HFEngine, SamplingParams
from rlvr.rollout.partial import PartialRunner
from rlvr.types import Problem, StepResult

from .test_runner import EchoEnv, length_reward


def make_partial(model, tokenizer, segment_tokens=4, make_env=None, max_turns=1, max_new=12):
    make_env = make_env or (lambda: SingleTurnEnv(length_reward, length_reward))
    return PartialRunner(
        HFEngine(model, tokenizer), tokenizer, make_env, SamplingParams(max_new, 1.0), max_turns,
        segment_tokens=segment_tokens,
    )  # fmt: skip


def teacher_forced(model, token_ids: list[int]) -> list[float]:
    ids = torch.tensor([token_ids])
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, ids, torch.ones_like(ids))
    return [0.0] + logprobs[0].tolist()


def test_generation_continues_under_the_weights_published_between_segments(tokenizer):
    """Version 0 writes the first segment, version 1 (other weights) the rest; each token's
    sampling logprob is the one of the weights its version names."""
    model = build_model("nano", tokenizer, seed=0).eval()
    versions = {0: copy.deepcopy(model), 1: build_model("nano", tokenizer, seed=1).eval()}
    runner = make_partial(model, tokenizer, segment_tokens=3)
    calls = []

    def version() -> int:
        v = min(len(calls), 1)
        if len(calls) == 1:  # after the first segment, load version 1 in place
            model.load_state_dict(versions[1].state_dict())
        calls.append(v)
        return v

    runner.admit([Problem("a", "1+1="), Problem("b", "22+33=")], 2, (0, 0, 0), [0, 1])
    groups = runner.advance(2, version)
    trajectories = [t for group in groups for t in group]
    assert len(trajectories) == 4 and calls[:2] == [0, 1]
    mixed = 0
    for t in trajectories:
        policy = [v for v, m in zip(t.versions, t.loss_mask) if m]
        assert policy[: min(3, len(policy))] == [0] * min(3, len(policy))
        mixed += len(set(policy)) == 2
        for v in set(policy):
            expected = teacher_forced(versions[v], t.token_ids)
            for i, (tv, m) in enumerate(zip(t.versions, t.loss_mask)):
                if m and tv == v:
                    assert abs(t.behaviour_logprobs[i] - expected[i]) < 1e-4
        assert t.reward == len(t.response_text) % 2
    assert mixed > 0  # some answers were written by both versions


def test_oldest_finished_groups_leave_first_and_none_twice(tiny_model, tokenizer):
    runner = make_partial(tiny_model, tokenizer)
    runner.admit([Problem("a", "1+1="), Problem("b", "2+2=")], 3, (0, 0, 1), [0, 1])
    runner.admit([Problem("c", "3+3="), Problem("d", "4+4=")], 3, (0, 0, 2), [0, 1])
    first = runner.advance(2, lambda: 0)
    second = runner.advance(2, lambda: 0)
    keys = [(tuple(g[0].info["admitted"]), g[0].group_id) for g in first + second]
    assert len(set(keys)) == 4 and all(len(g) == 3 for g in first + second)
    assert keys[:2] == sorted(keys[:2]) and keys[2:] == sorted(keys[2:])
    # a group of batch 2 leaves in the first call only if it finished before one of batch 1
    assert all(len({t.group_id for t in g}) == 1 for g in first + second)
    assert runner.unfinished_lengths() == []


def test_a_request_waits_for_its_batch_to_be_admitted(tiny_model, tokenizer):
    runner = make_partial(tiny_model, tokenizer)
    timer = threading.Timer(0.2, runner.admit, ([Problem("a", "1+1=")], 2, (0, 0, 0), [0]))
    timer.start()
    (group,) = runner.advance(1, lambda: 0)
    assert len(group) == 2


def test_the_reply_budget_counts_tokens_across_segments(tiny_model, tokenizer):
    runner = make_partial(tiny_model, tokenizer, segment_tokens=5, max_new=7)
    runner.admit([Problem("a", "1+1=")], 4, (0, 0, 0), [0])
    (group,) = runner.advance(1, lambda: 0)
    for t in group:
        assert t.num_generated <= 7
        cut = t.num_generated == 7 and t.token_ids[-1] != tokenizer.eos_token_id
        assert (t.finish_reason == "length") == cut


def test_multi_turn_episodes_continue_across_segments(tiny_model, tokenizer):
    runner = make_partial(tiny_model, tokenizer, segment_tokens=3, make_env=EchoEnv, max_turns=3)
    runner.admit([Problem("a", "start")], 2, (0, 0, 0), [0])
    (group,) = runner.advance(1, lambda: 7)
    for t in group:
        assert t.turn_rewards == [1.0, 1.0] and len(t.turn_ends) == 2
        assert [v for v, m in zip(t.versions, t.loss_mask) if m] == [7] * sum(t.loss_mask)
        assert all(v == -1 for v, m in zip(t.versions, t.loss_mask) if not m)


def test_a_batch_is_admitted_once_and_sampled_as_the_episode_runner_samples(tiny_model, tokenizer):
    """Group ids number the episodes and seed them as EpisodeRunner.collect would; admitting a
    batch seed again (a restarted worker's backlog arriving twice) adds nothing."""
    problems = [Problem("a", "1+1="), Problem("b", "2+2="), Problem("c", "3+3=")]
    runner = make_partial(tiny_model, tokenizer, segment_tokens=64, max_new=12)
    runner.admit(problems[1:], 2, (0, 0, 5), [1, 2])
    runner.admit(problems, 2, (0, 0, 5), [0, 1, 2])  # ignored: this batch is in already
    groups = runner.advance(2, lambda: 0)
    assert runner.unfinished_lengths() == [] and not runner.finished
    got = {t.sample_index: t for group in groups for t in group}
    whole = make_partial(tiny_model, tokenizer, max_new=12)
    expected = EpisodeRunner.collect(whole, problems, 2, (0, 0, 5))
    assert sorted(got) == [2, 3, 4, 5]
    for t in expected[2:]:  # one segment holds the whole reply: the same tokens
        assert got[t.sample_index].token_ids == t.token_ids
        assert got[t.sample_index].group_id == t.group_id


def test_the_env_steps_once_per_finished_reply(tiny_model, tokenizer):
    class CountingEnv:
        steps = 0

        def reset(self, problem):
            return problem.messages()

        def step(self, action_text):
            CountingEnv.steps += 1
            return StepResult(None, 1.0, True, {})

    runner = make_partial(tiny_model, tokenizer, segment_tokens=2, make_env=CountingEnv)
    runner.admit([Problem("a", "1+1=")], 3, (0, 0, 0), [0])
    runner.advance(1, lambda: 0)
    assert CountingEnv.steps == 3
