import threading
import time
from functools import partial

import pytest

from rlvr.envs import ENVS
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.envs.tool_env import ToolEnv, describe
from rlvr.envs.tools import Calculator, Search, ToolCall
from rlvr.rewards import REWARDS, score_safely
from rlvr.rollout.tokens import Conversation, encode_prompt, render, renders_tools
from rlvr.types import Problem

PROBLEM = Problem("p", "When was Ostwick founded?", answer="1300")
SEARCH = Search({"Ostwick": "Town on the river Lune. Founded 1300.", "Halby": "Founded 1410."})


def search_call(query="Ostwick"):
    return ToolCall("search", {"query": query}).render()


def inner():
    exact = partial(score_safely, REWARDS["exact"])
    return SingleTurnEnv(exact, exact)


class Counting:
    """Counts its runs, so tests can tell a refused call from a run one."""

    name = "count"
    description = "Count."
    parameters = {"type": "object", "properties": {}}

    def __init__(self):
        self.runs = 0

    def __call__(self, arguments):
        self.runs += 1
        return str(self.runs)


def test_reset_keeps_the_messages_and_the_tools_are_function_schemas():
    env = ToolEnv(inner(), [SEARCH, Calculator()])
    assert env.reset(PROBLEM) == PROBLEM.messages()
    assert env.tool_schemas == [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in (SEARCH, Calculator())
    ]


def test_without_native_tools_the_description_is_the_system_message(tokenizer):
    # The tiny model's template cannot render tools: the token layer puts rlvr's description of
    # the tagged format first, the same prompt ToolEnv.reset used to build itself.
    env = ToolEnv(inner(), [SEARCH, Calculator()])
    assert not renders_tools(tokenizer)
    system = describe([SEARCH, Calculator()])
    expected = [{"role": "system", "content": system}, {"role": "user", "content": PROBLEM.prompt}]
    assert render(tokenizer, env.reset(PROBLEM), True, env.tool_schemas) == render(
        tokenizer, expected, True
    )
    conversation = Conversation(tokenizer, env.reset(PROBLEM), tools=env.tool_schemas)
    assert conversation.token_ids == encode_prompt(tokenizer, expected)
    assert conversation.messages == PROBLEM.messages()  # the description is rendering only
    assert '<tool_call>{"name": ..., "arguments": {...}}</tool_call>' in system
    assert "\nsearch(query: string): Search the encyclopedia" in system
    assert "\ncalculator(expression: string): Evaluate" in system


def test_the_description_goes_first_in_an_existing_system_message(tokenizer):
    problem = Problem(
        "p", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q"}]
    )
    env = ToolEnv(inner(), [SEARCH])
    expected = [
        {"role": "system", "content": describe([SEARCH]) + "\n\nBe brief."},
        {"role": "user", "content": "Q"},
    ]
    assert render(tokenizer, env.reset(problem), True, env.tool_schemas) == render(
        tokenizer, expected, True
    )


def test_optional_arguments_are_marked():
    class Opt(Counting):
        parameters = {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "tag": {"type": "string"}},
            "required": ["n"],
        }

    assert describe([Opt()]).endswith("\ncount(n: integer, tag?: string): Count.")


def test_tool_call_then_final_answer_scored_by_the_inner_env():
    env = ToolEnv(inner(), [SEARCH])
    env.reset(PROBLEM)
    step = env.step(f"I will look it up. {search_call('Ostwick founded')}")
    assert step.observation == {
        "role": "tool",
        "content": "Ostwick: Town on the river Lune. Founded 1300.\nHalby: Founded 1410.",
    }
    assert (step.reward, step.done, step.info) == (0.0, False, {"tool_calls": 1, "tool_errors": 0})
    final = env.step("It was founded in 1300. #### 1300")
    assert final.done and final.reward == 1.0 and final.info["correct"]


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "search", "parameters": {"query": "Halby"}}',
        ' <|python_tag|>{"name": "search", "parameters": {"query": "Halby"}}\n',
        '{"name": "search", "arguments": {"query": "Halby"}}',
    ],
)
def test_llama_json_call_is_run(reply):
    env = ToolEnv(inner(), [SEARCH])
    env.reset(PROBLEM)
    step = env.step(reply)
    assert step.observation == {"role": "tool", "content": "Halby: Founded 1410."}
    assert (step.done, step.info) == (False, {"tool_calls": 1, "tool_errors": 0})


def test_bad_llama_call_gets_an_error_in_its_own_format():
    env = ToolEnv(inner(), [SEARCH])
    env.reset(PROBLEM)
    step = env.step('<|python_tag|>search.call(query="Halby")')
    assert step.observation["content"].startswith("error: malformed tool call: invalid JSON")
    assert step.observation["content"].endswith('write {"name": ..., "parameters": {...}}')
    assert not step.done and step.info == {"tool_calls": 1, "tool_errors": 1}
    wrong = env.step('{"name": "google", "parameters": {"query": "x"}}')
    assert wrong.observation["content"] == "error: unknown tool 'google'; available: search"


def test_json_that_is_not_a_call_is_an_answer():
    env = ToolEnv(inner(), [SEARCH])
    env.reset(PROBLEM)
    step = env.step('{"answer": "#### 1300"}')
    assert step.done and "tool_calls" not in step.info


def test_answer_without_searching_goes_straight_to_the_inner_env():
    env = ToolEnv(inner(), [SEARCH])
    env.reset(PROBLEM)
    step = env.step("#### 1250")
    assert step.done and step.reward == 0.0 and not step.info["correct"]


@pytest.mark.parametrize(
    "reply, error",
    [
        ('<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>', "error: malformed tool call: invalid JSON"),
        ('<tool_call>{"name": "google", "arguments": {"query": "x"}}</tool_call>', "error: unknown tool 'google'; available: search"),
        ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "error: tool 'search': missing argument(s) query"),
    ],
)  # fmt: skip
def test_bad_call_is_an_error_observation_and_the_episode_goes_on(reply, error):
    env = ToolEnv(inner(), [SEARCH])
    env.reset(PROBLEM)
    step = env.step(reply)
    assert not step.done and step.observation["role"] == "tool"
    assert step.observation["content"].startswith(error)
    assert step.info == {"tool_calls": 1, "tool_errors": 1}
    assert env.step(search_call()).info == {"tool_calls": 1, "tool_errors": 0}
    assert env.step("#### 1300").info["correct"]


def test_several_calls_in_one_reply_give_one_tool_message_each():
    env = ToolEnv(inner(), [SEARCH, Calculator()])
    env.reset(PROBLEM)
    calc = ToolCall("calculator", {"expression": "1300+1"}).render()
    step = env.step(f"{search_call('Halby')}\n{calc}\n<tool_call>oops</tool_call>")
    assert [m["role"] for m in step.observation] == ["tool"] * 3
    contents = [m["content"] for m in step.observation]
    assert contents[:2] == ["Halby: Founded 1410.", "1301"]
    assert contents[2].startswith("error: malformed tool call")
    assert step.info == {"tool_calls": 3, "tool_errors": 1}


def test_past_max_tool_calls_calls_are_refused_not_run():
    counter = Counting()
    env = ToolEnv(inner(), [counter], max_tool_calls=2)
    call = ToolCall("count", {}).render()
    env.reset(PROBLEM)
    assert env.step(call).observation["content"] == "1"
    bad = env.step("<tool_call>{}</tool_call>")  # failed calls count against the budget too
    assert bad.info["tool_errors"] == 1
    refused = env.step(call)
    assert refused.observation["content"] == (
        "error: no tool calls left (limit 2); give your final answer"
    )
    assert not refused.done and refused.info == {"tool_calls": 1, "tool_errors": 1}
    assert counter.runs == 1
    assert env.step("#### 1300").info["correct"]
    env.reset(PROBLEM)  # a new episode has the whole budget again
    assert env.step(call).observation["content"] == "2"


def test_a_raising_tool_is_an_error_observation():
    class Broken(Counting):
        def __call__(self, arguments):
            raise KeyError("boom")

    env = ToolEnv(inner(), [Broken()])
    env.reset(PROBLEM)
    step = env.step(ToolCall("count", {}).render())
    assert step.observation["content"] == "error: tool 'count' failed (KeyError: 'boom')"
    assert not step.done and step.info["tool_errors"] == 1


def test_a_hanging_tool_times_out():
    release = threading.Event()

    class Hanging(Counting):
        def __call__(self, arguments):
            release.wait(30)
            return "late"

    env = ToolEnv(inner(), [Hanging()], timeout_seconds=0.2)
    env.reset(PROBLEM)
    start = time.monotonic()
    step = env.step(ToolCall("count", {}).render())
    release.set()
    assert time.monotonic() - start < 2
    assert step.observation["content"] == "error: tool 'count' timed out after 0.2s"
    assert step.info["tool_errors"] == 1 and not step.done


def test_duplicate_tool_names_are_rejected():
    with pytest.raises(ValueError, match="unique"):
        ToolEnv(inner(), [SEARCH, SEARCH])


def test_registered():
    assert ENVS["tool"] is ToolEnv
