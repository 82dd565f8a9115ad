"""Search-then-answer: questions about invented towns, answerable only by searching the bundled
encyclopedia with the `search` tool ("When was Varholt founded?" -> search -> "#### 1447")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.envs.encyclopedia import RIVERS, TOWNS, Town
from rlvr.envs.single_turn import RewardFn, SingleTurnEnv
from rlvr.envs.tool_env import ToolEnv
from rlvr.envs.tools import Search, ToolCall
from rlvr.tasks.base import EpochOrder, seeded_rng
from rlvr.types import Message, Problem

Kind = Literal["founded", "population", "river"]
QUESTIONS: dict[str, str] = {
    "founded": "When was {} founded?",
    "population": "What is the population of {}?",
    "river": "Which river is {} on?",
}


class SearchQAParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: list[Kind] = Field(
        default=["founded", "population", "river"],
        min_length=1,
        description="Facts to ask about each town: founded (a year), population, river (a name).",
    )
    top_k: int = Field(2, ge=1, description="Search results returned per call.")
    snippet_chars: int = Field(
        80, ge=10, description="Each search result's text is cut to this many characters."
    )
    max_tool_calls: int = Field(
        2, ge=1, description="Tool calls per episode; past it a call is refused, not run."
    )


class SearchQATask:
    """Answer questions about invented towns by searching a bundled encyclopedia (tool use)."""

    name = "search_qa"
    verifier = "exact"
    Params = SearchQAParams
    # examples/search_qa.toml: a search call is about 70 characters; search, maybe search
    # again, answer; the tiny model's context is 512 tokens.
    recommended_tiny = {
        "model.preset": "micro",
        "model.pretrain_steps": 1200,
        "rollout.max_new_tokens": 80,
        "rollout.max_turns": 3,
        "rollout.max_total_tokens": 512,
    }

    def __init__(self, params: SearchQAParams, seed: int, eval_size: int):
        self.params, self.seed = params, seed
        self.search = Search(top_k=params.top_k, snippet_chars=params.snippet_chars)
        problems = [self._problem(town, kind) for town in TOWNS for kind in params.questions]
        if eval_size >= len(problems):
            raise ValueError(
                f"search_qa has {len(problems)} questions with these settings, so "
                f"eval_size={eval_size} leaves none to train on; lower task.eval_size"
            )
        seeded_rng(seed, "split").shuffle(problems)
        # Disjoint by question: a town may be asked about in train and, for another fact, in eval.
        self._eval, self._train = problems[:eval_size], problems[eval_size:]
        self._train_order = EpochOrder(self._train, seed)

    def _problem(self, town: Town, kind: str) -> Problem:
        return Problem(
            id=f"search_qa-{town.name}-{kind}",
            prompt=f"{QUESTIONS[kind].format(town.name)} End with #### answer.",
            answer=str(getattr(town, kind)),
            domain="search_qa",
            metadata={"town": town.name, "kind": kind},
        )

    def train_problem(self, index: int) -> Problem:
        return self._train_order[index]

    def eval_problems(self) -> list[Problem]:
        return list(self._eval)

    def make_env(self, reward: RewardFn, verifier: RewardFn) -> ToolEnv:
        return ToolEnv(SingleTurnEnv(reward, verifier), [self.search], self.params.max_tool_calls)

    def demonstration(self, problem: Problem, flawed: bool = False) -> list[Message]:
        """The messages after the prompt (`make_env(...).reset(problem)`): search the town's name,
        read the real search result, answer. Flawed: answer at once with a plausible guess."""
        if flawed:
            return [{"role": "assistant", "content": f"#### {self._guess(problem)}"}]
        call = ToolCall("search", {"query": problem.metadata["town"]})
        result = self.search(call.arguments)
        if problem.answer not in result:
            raise RuntimeError(f"{problem.id}: searching the town's name did not find the answer")
        return [
            {"role": "assistant", "content": call.render()},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": f"#### {problem.answer}"},
        ]

    def _guess(self, problem: Problem) -> str:
        """A wrong answer of the right kind, as a model that did not look it up would give."""
        rng = seeded_rng(self.seed, "guess", problem.id)
        draw = {
            "founded": lambda: str(rng.randint(1100, 1899)),
            "population": lambda: str(rng.randint(800, 99_000)),
            "river": lambda: rng.choice(RIVERS),
        }[problem.metadata["kind"]]
        guess = draw()
        while guess == problem.answer:
            guess = draw()
        return guess
