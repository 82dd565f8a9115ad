from functools import partial

import pytest

from rlvr.envs.encyclopedia import DOCUMENTS, TOWNS
from rlvr.envs.tool_env import ToolEnv, describe
from rlvr.rewards import REWARDS, score_safely
from rlvr.rollout.engine import Completion, SamplingParams
from rlvr.rollout.runner import EpisodeRunner
from rlvr.rollout.tokens import render
from rlvr.tasks import TASKS
from rlvr.tasks.search_qa import QUESTIONS, SearchQAParams, SearchQATask
from rlvr.train.warmstart import sft_example


def task(seed=0, eval_size=40, **params):
    return SearchQATask(SearchQAParams(**params), seed=seed, eval_size=eval_size)


def every_problem(t):
    return t.eval_problems() + [t.train_problem(i) for i in range(len(t._train))]


def make_env(t):
    verifier = partial(score_safely, REWARDS[t.verifier])
    return t.make_env(verifier, verifier)


def test_registered_with_a_known_verifier():
    assert TASKS["search_qa"] is SearchQATask and SearchQATask.verifier in REWARDS
    assert isinstance(make_env(task()), ToolEnv)


def test_the_bundled_encyclopedia_is_pinned():
    # Generated from a fixed seed: a change here silently changes every run's questions.
    assert len(DOCUMENTS) == len(TOWNS) == 80
    assert DOCUMENTS["Varholt"] == "Town on the river Osk. Founded 1447. Population 92699."
    assert TOWNS[0].name == "Ashby" and TOWNS[0].founded == 1463


def test_split_is_disjoint_by_question_and_deterministic():
    t = task(seed=3)
    eval_ids = [p.id for p in t.eval_problems()]
    train_ids = [t.train_problem(i).id for i in range(len(t._train))]
    assert len(eval_ids) == 40 and len(set(train_ids)) == len(TOWNS) * 3 - 40
    assert not set(eval_ids) & set(train_ids)
    assert eval_ids == [p.id for p in task(seed=3).eval_problems()]
    assert eval_ids != [p.id for p in task(seed=4).eval_problems()]
    assert t.train_problem(5) == task(seed=3).train_problem(5)
    assert t.train_problem(len(t._train) + 1).id in train_ids  # later epochs stay in train


def test_problems_ask_only_the_chosen_facts():
    t = task(questions=["river"], eval_size=10)
    problems = every_problem(t)
    assert len(problems) == len(TOWNS)
    p = next(p for p in problems if p.metadata["town"] == "Varholt")
    assert p.prompt == "Which river is Varholt on? End with #### answer." and p.answer == "Osk"


def test_eval_size_must_leave_training_questions():
    with pytest.raises(ValueError, match="lower task.eval_size"):
        task(eval_size=240)


@pytest.mark.parametrize("query", ["name", "question"])
def test_search_ranks_the_answer_document_first_for_every_question(query):
    t = task()
    search = t.search
    hits = 0
    for p in every_problem(t):
        town = p.metadata["town"]
        text = town if query == "name" else QUESTIONS[p.metadata["kind"]].format(town)
        hits += search.rank(text)[0] == town
    assert hits == len(TOWNS) * 3  # top-1 recall 1.0


def replay(env, problem, demonstration):
    """Drive the env with the demonstration's assistant replies; check each observation it
    gives matches the demonstration's next message. Returns the last step."""
    env.reset(problem)
    replies = [i for i, m in enumerate(demonstration) if m["role"] == "assistant"]
    for i in replies:
        step = env.step(demonstration[i]["content"])
        if i + 1 < len(demonstration):
            assert step.observation == demonstration[i + 1]
    return step


def test_demonstrations_search_and_answer_correctly_and_flawed_ones_do_not():
    t = task()
    verifier = REWARDS[t.verifier]
    for p in every_problem(t):
        demo = t.demonstration(p)
        assert [m["role"] for m in demo] == ["assistant", "tool", "assistant"]
        final = replay(make_env(t), p, demo)
        assert final.done and final.info["correct"] and final.reward == 1.0
        flawed = t.demonstration(p, flawed=True)
        assert len(flawed) == 1 and "<tool_call>" not in flawed[0]["content"]
        final = replay(make_env(t), p, flawed)
        assert final.done and not final.info["correct"]
        assert verifier(p, flawed[0]["content"]).status == "wrong"
        assert t.demonstration(p, flawed=True) == flawed  # deterministic


def test_golden_demonstration():
    t = task()
    p = next(p for p in every_problem(t) if p.id == "search_qa-Varholt-founded")
    assert t.demonstration(p) == [
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "search", "arguments": {"query": "Varholt"}}</tool_call>',
        },
        {"role": "tool", "content": "Varholt: Town on the river Osk. Founded 1447. Population 92699."},
        {"role": "assistant", "content": "#### 1447"},
    ]  # fmt: skip


def test_whole_episodes_fit_the_tiny_model(tokenizer):
    t = task()
    for p in every_problem(t):
        demo = t.demonstration(p)
        assert sum(len(m["content"]) for m in demo) < 200
        env = make_env(t)  # the tiny template gets the tools described in the system message
        episode = render(tokenizer, env.reset(p) + demo, False, env.tool_schemas)
        assert "search(query: string)" in episode
        assert len(tokenizer(episode, add_special_tokens=False)["input_ids"]) < 480


def test_warm_start_demonstrations_keep_the_tiny_models_layout(tokenizer):
    # The token layer now describes the tools (ToolEnv.reset no longer does); for the tiny
    # model's template the demonstrations' tokens are the same as before, so cached warm
    # starts stay valid.
    t = task()
    for index in range(3):
        ids, _ = sft_example(tokenizer, t, index, flawed=False)
        p = t.train_problem(index)
        system = {"role": "system", "content": describe([t.search])}
        before = render(tokenizer, [system, *p.messages(), *t.demonstration(p)], False)
        assert ids == tokenizer(before, add_special_tokens=False)["input_ids"]


class ScriptedEngine:
    """Replies with each problem's demonstration, turn by turn, whatever the prompt's tokens."""

    def __init__(self, tokenizer, scripts):
        self.tokenizer, self.scripts = tokenizer, scripts

    def generate(self, prompts, params, seeds=None):
        completions = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            question = next(q for q in self.scripts if q in text)
            reply = self.scripts[question][text.count("<|assistant|>") - 1]
            tokens = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
            eos = [self.tokenizer.eos_token_id]
            completions.append(Completion(tokens + eos, [0.0] * (len(tokens) + 1), "eos", reply))
        return completions


def test_demonstrations_replayed_by_the_episode_runner(tokenizer):
    t = task()
    problems = t.eval_problems()[:4]
    scripts = {
        p.prompt: [m["content"] for m in t.demonstration(p, flawed=i % 2) if m["role"] == "assistant"]
        for i, p in enumerate(problems)
    }  # fmt: skip
    runner = EpisodeRunner(
        ScriptedEngine(tokenizer, scripts), tokenizer, lambda: make_env(t), SamplingParams(80),
        max_turns=4, max_total_tokens=512,
    )  # fmt: skip
    trajectories = runner.collect(problems, group_size=1, seed=(0,))
    for i, trajectory in enumerate(trajectories):
        flawed = i % 2 == 1
        assert trajectory.correct is not flawed and trajectory.info["ended_by"] == "done"
        assert trajectory.info["tool_calls"] == (0 if flawed else 1)
        assert trajectory.info["tool_errors"] == 0
        assert trajectory.turn_rewards == ([0.0] if flawed else [0.0, 1.0])
        text = tokenizer.decode(trajectory.token_ids)
        assert "<|tool|>" in text or flawed
