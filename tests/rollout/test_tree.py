import itertools
import math
from collections import defaultdict

import pytest
import torch

from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.rollout import EpisodeRunner, HFEngine, SamplingParams
from rlvr.rollout.tokens import encode_prompt
from rlvr.rollout.tree import TreeRunner, entropy_scorer, fork_env, segment_tensors
from rlvr.types import Problem, Score, StepResult, Trajectory

PROBLEMS = [Problem("a", "1+1="), Problem("b", "22+33=")]
PARAMS = SamplingParams(16, 1.0)


def parity_reward(problem, response):
    return Score(float(len(response) % 2), "ok")


def single_turn_env():
    return SingleTurnEnv(parity_reward, parity_reward)


class HistoryEnv:
    """Three turns; remembers every reply (state a branch must copy, not share); at the end,
    reward 1 when the replies' total length is odd."""

    def reset(self, problem):
        self.history = []
        return problem.messages()

    def step(self, action_text):
        self.history.append(action_text)
        done = len(self.history) == 3
        reward = float(sum(map(len, self.history)) % 2) if done else 0.0
        observation = None if done else f"turn {len(self.history)}: {len(action_text)}"
        return StepResult(observation, reward, done, {"history": list(self.history)})


def tree_runner(model, tokenizer, make_env=single_turn_env, max_turns=1, **tree):
    settings = {"width": 2, "depth": 2, "min_segment_tokens": 2, **tree}
    engine = HFEngine(model, tokenizer)
    return TreeRunner(engine, tokenizer, make_env, PARAMS, max_turns, **settings)


def episode_runner(model, tokenizer, make_env=single_turn_env, max_turns=1):
    return EpisodeRunner(HFEngine(model, tokenizer), tokenizer, make_env, PARAMS, max_turns)


def by_group(trajectories):
    groups = defaultdict(list)
    for t in trajectories:
        groups[t.group_id].append(t)
    return groups


def shared_prefix_end(a: Trajectory, b: Trajectory) -> int:
    """One past the last token of the deepest segment two leaves share (0: none)."""
    b_nodes = {s["node"] for s in b.info["tree"]["segments"]}
    shared = [s for s in a.info["tree"]["segments"] if s["node"] in b_nodes]
    return shared[-1]["end"] if shared else a.info["tree"]["segments"][0]["start"]


def policy_spans(t: Trajectory) -> list[list[int]]:
    spans, start = [], None
    for i, m in enumerate(t.loss_mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append(t.token_ids[start:i])
            start = None
    return spans


@pytest.fixture(scope="module")
def single(tiny_model, tokenizer):
    """One single-turn tree collect shared by the read-only checks: width 2, depth 3, 8 leaves."""
    runner = tree_runner(tiny_model, tokenizer, depth=3)
    return runner.collect(PROBLEMS, 8, seed=(0, 0, 0)), runner.stats


@pytest.fixture(scope="module")
def multi(tiny_model, tokenizer):
    """A multi-turn tree branching at turn boundaries: a full binary tree of 3 levels."""
    runner = tree_runner(tiny_model, tokenizer, HistoryEnv, max_turns=3, depth=3)
    return runner.collect(PROBLEMS[:1], 8, seed=(0, 0, 0)), runner.stats


# ---------------------------------------------------------------- shape of the output


@pytest.mark.parametrize(("group_size", "budget", "leaves"), [(1, None, 1), (3, None, 3), (4, None, 4), (6, None, 6), (4, 3, 3), (2, 5, 2)])  # fmt: skip
def test_leaf_count_respects_the_budget(tiny_model, tokenizer, group_size, budget, leaves):
    runner = tree_runner(tiny_model, tokenizer, budget=budget)
    out = runner.collect(PROBLEMS, group_size, seed=(0, 0, 1))
    assert [t.group_id for t in out] == [0] * leaves + [1] * leaves
    assert [t.sample_index for t in out] == list(range(2 * leaves))
    assert runner.stats["leaves"] == 2 * leaves
    # width 2, depth 2 grows at most 4 leaves by branching: more are extra root episodes
    assert runner.stats["fallback_leaves"] >= 2 * max(leaves - 4, 0)


def test_loss_mask_covers_exactly_policy_tokens_and_segments_partition_them(single, tokenizer):
    out, _ = single
    for t in out:
        prompt = encode_prompt(tokenizer, t.problem.messages())
        assert t.token_ids[: len(prompt)] == prompt
        assert t.loss_mask == [0] * len(prompt) + [1] * (len(t.token_ids) - len(prompt))
        assert all(lp == 0.0 for lp, m in zip(t.behaviour_logprobs, t.loss_mask) if not m)
        assert t.turn_ends == [len(t.token_ids)]
        assert t.reward == len(t.response_text) % 2
        segments = t.info["tree"]["segments"]
        assert segments[0]["start"] == len(prompt) and segments[-1]["end"] == len(t.token_ids)
        for above, below in itertools.pairwise(segments):
            assert above["end"] == below["start"] and above["node"] == below["parent"]
        assert all(s["start"] < s["end"] for s in segments)


def test_leaves_sharing_a_node_share_prefix_tokens_and_logprobs(single):
    out, stats = single
    assert stats["fallback_leaves"] < len(out) / 2  # a real tree, not mostly root episodes
    deep = 0
    for group in by_group(out).values():
        for a, b in itertools.combinations(group, 2):
            end = shared_prefix_end(a, b)
            assert a.token_ids[:end] == b.token_ids[:end]
            assert a.behaviour_logprobs[:end] == b.behaviour_logprobs[:end]
            assert a.loss_mask[:end] == b.loss_mask[:end]
            prompt = a.info["tree"]["segments"][0]["start"]
            deep += end > prompt
    assert deep > 0


def test_behaviour_logprobs_are_the_models_on_every_leaf(single, tiny_model):
    # A forked continuation must be sampled given its shared prefix: teacher-forcing each
    # leaf through the model gives back its behaviour logprobs.
    out, _ = single
    for t in out:
        ids = torch.tensor([t.token_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(tiny_model(input_ids=ids).logits[0, :-1].float(), -1)
        chosen = logprobs.gather(-1, ids[0, 1:, None]).squeeze(-1)
        mask = torch.tensor(t.loss_mask[1:], dtype=torch.bool)
        behaviour = torch.tensor(t.behaviour_logprobs[1:])
        torch.testing.assert_close(chosen[mask], behaviour[mask], atol=1e-4, rtol=0)


def test_node_values_are_the_mean_outcome_of_their_leaves(single):
    out, _ = single
    for group in by_group(out).values():
        outcomes = defaultdict(list)
        for t in group:
            assert t.info["tree"]["outcome"] == t.reward
            outcomes[t.info["tree"]["root"]].append(t.reward)
            for s in t.info["tree"]["segments"]:
                outcomes[s["node"]].append(t.reward)
        for t in group:
            for s in t.info["tree"]["segments"]:
                assert s["value"] == pytest.approx(sum(outcomes[s["node"]]) / s["leaves"])
                assert s["leaves"] == len(outcomes[s["node"]])
                parent = outcomes[s["parent"]]
                assert s["parent_value"] == pytest.approx(sum(parent) / len(parent))
            # the segment credits of a leaf add up to its reward minus the group mean
            total = sum(s["value"] - s["parent_value"] for s in t.info["tree"]["segments"])
            assert total == pytest.approx(t.reward - sum(r.reward for r in group) / len(group))


def test_same_seed_same_tree_different_seed_different(tiny_model, tokenizer):
    runner = tree_runner(tiny_model, tokenizer, depth=3)
    first = runner.collect(PROBLEMS, 6, seed=(0, 0, 5))
    again = tree_runner(tiny_model, tokenizer, depth=3).collect(PROBLEMS, 6, seed=(0, 0, 5))
    other = runner.collect(PROBLEMS, 6, seed=(0, 0, 6))
    assert [t.token_ids for t in first] == [t.token_ids for t in again]
    assert [t.behaviour_logprobs for t in first] == [t.behaviour_logprobs for t in again]
    assert [t.info["tree"] for t in first] == [t.info["tree"] for t in again]
    assert [t.token_ids for t in first] != [t.token_ids for t in other]
    # batching does not matter: the first problem alone grows the same tree
    alone = runner.collect(PROBLEMS[:1], 6, seed=(0, 0, 5))
    assert [t.token_ids for t in alone] == [t.token_ids for t in first[:6]]


def test_prefix_sharing_generates_fewer_tokens_than_independent_episodes(
    single, tiny_model, tokenizer
):
    out, stats = single
    assert stats["independent_tokens"] == sum(t.num_generated for t in out)
    # every leaf token is either sampled once for the tree or copied from a shared prefix
    assert stats["tokens_generated"] < stats["independent_tokens"]
    independent = episode_runner(tiny_model, tokenizer).collect(PROBLEMS, 8, seed=(0, 0, 0))
    independent_cost = sum(t.num_generated for t in independent)
    assert stats["tokens_generated"] < independent_cost
    rewards = {g: {t.reward for t in group} for g, group in by_group(out).items()}
    useful = sum(8 for values in rewards.values() if len(values) > 1)
    assert stats["useful_samples"] == useful > 0
    assert stats["tokens_per_useful_sample"] == stats["tokens_generated"] / useful


# ---------------------------------------------------------------- equivalences


def test_a_tree_without_branches_is_the_episode_runner(tiny_model, tokenizer):
    for make_env, max_turns in [(single_turn_env, 1), (HistoryEnv, 3)]:
        tree = tree_runner(tiny_model, tokenizer, make_env, max_turns, width=4, depth=1)
        runner = episode_runner(tiny_model, tokenizer, make_env, max_turns)
        got = tree.collect(PROBLEMS, 4, seed=(3, 1, 2))
        want = runner.collect(PROBLEMS, 4, seed=(3, 1, 2))
        for g, w in zip(got, want, strict=True):
            assert (g.token_ids, g.loss_mask, g.behaviour_logprobs) == (
                w.token_ids, w.loss_mask, w.behaviour_logprobs,
            )  # fmt: skip
            assert (g.turn_rewards, g.turn_ends, g.response_text, g.finish_reason) == (
                w.turn_rewards, w.turn_ends, w.response_text, w.finish_reason,
            )  # fmt: skip
            assert g.info.get("history") == w.info.get("history")
        assert tree.stats["tokens_generated"] == tree.stats["independent_tokens"]


def test_multi_turn_trees_branch_at_turn_boundaries_with_copied_env_state(multi, tokenizer):
    out, stats = multi
    assert len(out) == 8 and stats["fallback_leaves"] == 0
    levels = defaultdict(set)
    for t in out:
        segments = t.info["tree"]["segments"]
        assert [s["level"] for s in segments] == [1, 2, 3]  # root, turn 1, turn 2 branch
        assert [s["leaves"] for s in segments] == [4, 2, 1]
        spans = policy_spans(t)
        assert len(spans) == 3 and len(t.turn_ends) == 3
        for k, s in enumerate(segments[:-1]):
            # the node below turn k sits where reply k + 1 starts, after the observation
            assert s["end"] == t.turn_ends[k + 1] - len(spans[k + 1])
            assert t.loss_mask[s["end"] - 1] == 0 and t.loss_mask[s["end"]] == 1
            levels[s["level"]].add(s["node"])
        # each branch stepped its own copy of the env: its history is its own replies
        replies = [tokenizer.decode(s, skip_special_tokens=True) for s in spans]
        assert t.info["history"] == replies
        assert t.reward == float(sum(map(len, replies)) % 2)
        # and the tokens are what the chat template renders for that conversation (the
        # untrained model may sample special tokens mid-reply: they stay in the token ids)
        eos = tokenizer.eos_token_id
        raw = [tokenizer.decode(s[:-1] if s[-1] == eos else s) for s in spans]
        messages = [{"role": "user", "content": "1+1="}]
        for k, reply in enumerate(replies):
            messages.append({"role": "assistant", "content": raw[k]})
            if k < 2:
                messages.append({"role": "user", "content": f"turn {k + 1}: {len(reply)}"})
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        expected = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        ends_with_eos = spans[-1][-1] == tokenizer.eos_token_id
        assert t.token_ids == (expected if ends_with_eos else expected[:-1])
    assert {k: len(v) for k, v in levels.items()} == {1: 2, 2: 4}
    assert stats["tokens_generated"] < stats["independent_tokens"]


def test_expansion_sees_earlier_outcomes_and_prefers_failed_paths(tiny_model, tokenizer):
    # group 3 with width 2: the root's two episodes, then one of them is split. With one
    # success and one failure, the failed one is split and its outcome is recorded.
    runner = tree_runner(tiny_model, tokenizer, HistoryEnv, max_turns=3)
    for seed in range(20):
        out = runner.collect(PROBLEMS[:1], 3, seed=(seed,))
        split = [t for t in out if len(t.info["tree"]["segments"]) == 2]
        roots = [t for t in out if len(t.info["tree"]["segments"]) == 1]
        original = min(split, key=lambda t: t.info["tree"]["leaf"])
        if original.reward != roots[0].reward:
            break
    else:
        pytest.fail("no seed gave the root one success and one failure")
    assert original.reward == 0.0 and roots[0].reward == 1.0
    forked = max(split, key=lambda t: t.info["tree"]["leaf"])
    seen = {s["leaf"]: s for s in forked.info["tree"]["seen"]}
    assert seen.keys() == {original.info["tree"]["leaf"], roots[0].info["tree"]["leaf"]}
    failed = seen[original.info["tree"]["leaf"]]
    assert failed["outcome"] == 0.0 and failed["response_text"] == original.response_text
    replies = [tokenizer.decode(s, skip_special_tokens=True) for s in policy_spans(original)]
    assert failed["history"] == [  # the messages after the root: every turn but the last
        {"role": "assistant", "content": replies[0]},
        {"role": "user", "content": f"turn 1: {len(replies[0])}"},
        {"role": "assistant", "content": replies[1]},
        {"role": "user", "content": f"turn 2: {len(replies[1])}"},
    ]
    assert original.info["tree"]["seen"] == []  # a root episode knew nothing yet
    assert forked.info["tree"]["branch"][:1] == original.info["tree"]["branch"]


# ---------------------------------------------------------------- branch scores and envs


def test_token_branch_point_is_the_highest_scoring_token_in_the_window(tiny_model, tokenizer):
    scorer = entropy_scorer(tiny_model, PARAMS)
    runner = tree_runner(tiny_model, tokenizer, scorer=scorer, min_segment_tokens=3)
    out = runner.collect(PROBLEMS[:1], 3, seed=(0, 0, 0))
    assert runner.timings["score"] > 0
    split = [t for t in out if len(t.info["tree"]["segments"]) == 2]
    original = min(split, key=lambda t: t.info["tree"]["leaf"])
    start, cut = (s["start"] for s in original.info["tree"]["segments"])
    prompt, reply = original.token_ids[:start], original.token_ids[start:]
    ids = torch.tensor([original.token_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(tiny_model(input_ids=ids).logits[0, start - 1 : -1], -1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    (scores,) = scorer([prompt], [reply])
    torch.testing.assert_close(torch.tensor(scores), entropy, atol=1e-4, rtol=0)
    # depth 2: the branch leaves 3 tokens above it and 3 for the leaf below it
    window = range(3, len(reply) - 3 + 1)
    assert cut - start == max(window, key=lambda i: (scores[i], -i))


def test_fork_env_copies_state_and_shares_callables():
    env = SingleTurnEnv(parity_reward, parity_reward)
    env.reset(PROBLEMS[0])
    env.notes = ["x"]
    copy = fork_env(env)
    assert copy.reward is env.reward and copy.verifier is env.verifier
    assert copy.notes == ["x"] and copy.notes is not env.notes
    assert copy.problem == env.problem

    class Forkable:
        def fork(self):
            return "forked"

    assert fork_env(Forkable()) == "forked"


def test_invalid_settings_fail_fast(tiny_model, tokenizer):
    for bad in [{"width": 1}, {"depth": 0}, {"budget": 0}, {"branch_at": "leaf"}]:
        with pytest.raises(ValueError):
            tree_runner(tiny_model, tokenizer, **bad)


# ---------------------------------------------------------------- per-token tensors


def hand_tree() -> list[Trajectory]:
    """Root (prompt 2 tokens) -> A, B (2 tokens each) -> two leaves each (2 tokens each).
    Outcomes: a1 = 1, a2 = 0, b1 = 1, b2 = 1."""

    def leaf(branch, leaf_id, reward):
        segments = [
            {"node": branch, "parent": 0, "start": 2, "end": 4},
            {"node": leaf_id, "parent": branch, "start": 4, "end": 6},
        ]
        return Trajectory(
            Problem("p", "q"), 0, leaf_id, [9] * 6, [0, 0, 1, 1, 1, 1], [0.0] * 6, [reward],
            [6], info={"tree": {"root": 0, "segments": segments}},
        )  # fmt: skip

    return [leaf(1, 3, 1.0), leaf(1, 4, 0.0), leaf(2, 5, 1.0), leaf(2, 6, 1.0)]


def test_segment_tensors_golden():
    # V(root) = .75, V(A) = .5, V(B) = 1: A's segment -.25, B's +.25, shared by 2 leaves each;
    # leaf segments: a1 1 - .5 = .5, a2 -.5, b1 and b2 1 - 1 = 0, one leaf each.
    adv, weights = segment_tensors(hand_tree(), 5)
    assert adv.tolist() == [
        [0, -0.25, -0.25, 0.5, 0.5],
        [0, -0.25, -0.25, -0.5, -0.5],
        [0, 0.25, 0.25, 0, 0],
        [0, 0.25, 0.25, 0, 0],
    ]
    assert weights.tolist() == [[0, 0.5, 0.5, 1, 1]] * 4
    # wider than the rows: zero padding; rewards given: values are recomputed from them
    adv, weights = segment_tensors(hand_tree(), 7, rewards=[2.0, 0.0, 1.0, 1.0])
    assert adv[0].tolist() == [0, 0, 0, 1, 1, 0, 0]  # V(A) = 1 = V(root), a1: 2 - 1
    assert weights[:, 5:].abs().sum() == 0


def test_segment_tensors_recompute_values_over_the_rows_kept():
    # b2 dropped (say an infrastructure error): V(root) = 2/3, B's segment 1 - 2/3, one leaf
    adv, weights = segment_tensors(hand_tree()[:3], 5)
    torch.testing.assert_close(adv[2, 1:3], torch.full((2,), 1 / 3))
    torch.testing.assert_close(adv[0, 1:3], torch.full((2,), 0.5 - 2 / 3))
    assert weights[2].tolist() == [0, 1, 1, 1, 1]


def test_segment_tensors_of_a_real_tree_match_its_info(single):
    out, _ = single
    width = max(len(t.token_ids) for t in out) - 1
    adv, weights = segment_tensors(out, width)
    for row, t in enumerate(out):
        for s in t.info["tree"]["segments"]:
            for i in range(s["start"], s["end"]):
                assert adv[row, i - 1].item() == pytest.approx(s["value"] - s["parent_value"])
                assert weights[row, i - 1].item() == pytest.approx(1 / s["leaves"])
        assert adv[row, len(t.token_ids) - 1 :].abs().sum() == 0
    # each distinct policy token counts once when weighted: weights sum to unique tokens
    unique = sum(s["end"] - s["start"] for s in {
        (t.group_id, s["node"]): s for t in out for s in t.info["tree"]["segments"]
    }.values())  # fmt: skip
    assert math.isclose(float(weights.sum()), unique, rel_tol=1e-6)


def test_segment_tensors_need_tree_trajectories():
    t = hand_tree()[0]
    t.info = {}
    with pytest.raises(ValueError, match="TreeRunner"):
        segment_tensors([t], 5)
