"""Any reasoning-gym dataset by name as a task, verified by that dataset's own scorer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlvr.rewards.reasoning_gym import open_dataset, reasoning_gym_score
from rlvr.tasks.base import seeded_rng
from rlvr.types import Problem

INSTRUCTION = "Put your final answer in <answer></answer> tags."
# Eval reads at most this many entries per eval problem while looking for distinct questions.
EVAL_DRAWS = 4
# Bounds the skips past train entries whose question is also an eval question.
MAX_SKIPS = 1_000
# Flawed demonstrations try this many other problems' answers when no perturbed number is wrong.
OTHER_ANSWERS = 20


class ReasoningGymParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(
        description="reasoning-gym dataset name, e.g. 'leg_counting', 'basic_arithmetic', "
        "'chain_sum' (all: python -c 'import reasoning_gym.factory as f; print(sorted(f.DATASETS))')."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The dataset's own settings, passed to reasoning_gym.create_dataset, e.g. "
        "{max_animals: 3}; seed and size are not allowed (train.seed and task.size set them).",
    )
    size: int = Field(
        10_000,
        gt=0,
        description="Dataset entries in the train pool; train problems cycle through it.",
    )


class ReasoningGymTask:
    """A reasoning-gym dataset: its questions, its answers as demonstrations, its own scorer."""

    name = "reasoning_gym"
    verifier = "reasoning_gym"
    Params = ReasoningGymParams
    # examples/reasoning_gym.toml's warm start: prompts are prose, longer than arithmetic's.
    recommended_tiny = {"model.preset": "micro", "model.pretrain_steps": 1200}

    def __init__(self, params: ReasoningGymParams, seed: int, eval_size: int):
        for key in ("seed", "size"):
            if key in params.config:
                raise ValueError(
                    f"task.config must not set {key!r}: rlvr sets the dataset's seed from "
                    "train.seed and its size from task.size (plus room for the eval problems)"
                )
        self.params, self.seed = params, seed
        # Eval entries come first in the dataset and train entries after, so they never share
        # an entry; questions are compared as well, since small settings repeat questions.
        self._eval_span = EVAL_DRAWS * eval_size
        self._dataset = open_dataset(
            params.dataset,
            params.config,
            seed=seeded_rng(seed, "reasoning_gym").randrange(2**31),
            size=self._eval_span + params.size,
        )
        self._eval: dict[str, Problem] = {}
        for position in range(self._eval_span):
            if len(self._eval) == eval_size:
                break
            problem = self._problem(position)
            self._eval.setdefault(problem.metadata["entry"]["question"], problem)
        if len(self._eval) < eval_size:
            raise ValueError(
                f"reasoning-gym dataset {params.dataset!r}: only {len(self._eval)} distinct "
                f"questions in its first {self._eval_span} entries, short of eval_size={eval_size}; "
                "lower task.eval_size or widen task.config"
            )

    def _problem(self, position: int) -> Problem:
        entry = self._dataset[position]
        name = self.params.dataset
        return Problem(
            id=f"{name}-{position}",
            prompt=f"{entry['question'].strip()}\n\n{INSTRUCTION}",
            answer=None if entry["answer"] is None else str(entry["answer"]),
            domain=entry["metadata"].get("source_dataset", name),
            metadata={"dataset": name, "config": self.params.config, "entry": entry},
        )

    def train_problem(self, index: int) -> Problem:
        size = self.params.size
        for skip in range(min(size, MAX_SKIPS)):
            problem = self._problem(self._eval_span + (index + skip) % size)
            if problem.metadata["entry"]["question"] not in self._eval:
                return problem
        raise ValueError(
            f"reasoning-gym dataset {self.params.dataset!r}: the eval set covers almost every "
            "question these settings allow; lower task.eval_size or widen task.config"
        )

    def eval_problems(self) -> list[Problem]:
        return list(self._eval.values())

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        """The bare answer in the tags the prompt asks for; flawed: a wrong answer the scorer rejects."""
        if problem.answer is None:
            raise ValueError(
                f"reasoning-gym dataset {self.params.dataset!r} gives no reference answers (its "
                "scorer checks replies itself), so there are no demonstrations to warm-start "
                "the tiny model on; choose a dataset with answers or a pretrained model"
            )
        if not flawed:
            return f"<answer>{problem.answer}</answer>"
        for wrong in self._wrong_answers(problem):
            reply = f"<answer>{wrong}</answer>"
            if reasoning_gym_score(problem, reply).value < 1:
                return reply
        # No plausible wrong answer found (every candidate also scores 1): reply with none.
        return "<answer></answer>"

    def _wrong_answers(self, problem: Problem) -> Iterator[str]:
        """Candidates in order: the answer's last number off by 1 or 2, then other problems' answers."""
        rng = seeded_rng(self.seed, "flawed", problem.id)
        answer = problem.answer
        numbers = list(re.finditer(r"\d+", answer))
        if numbers:
            last = numbers[-1]
            value = int(last.group())
            for delta in rng.sample([-2, -1, 1, 2], 4):
                if value + delta >= 0:
                    yield answer[: last.start()] + str(value + delta) + answer[last.end() :]
        for _ in range(OTHER_ANSWERS):
            other = self.train_problem(rng.randrange(self.params.size)).answer
            if other is not None and other != answer:
                yield other
