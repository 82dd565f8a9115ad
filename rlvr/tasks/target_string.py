"""Say one fixed target string, whatever the prompt's cue: a toy where the base model's prior on
the answer is set by its warm start (SFT+ shows the target, SFT- never does), for studying when
RL can find a behaviour (exploration, dense vs sparse rewards, spurious rewards)."""

from __future__ import annotations

import random
import string
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.tasks.base import EpochOrder, GeneratedTask, seeded_rng
from rlvr.tasks.paraphrase import reworded
from rlvr.types import Problem

LETTERS = string.ascii_lowercase
# task.paraphrase: the prompt in other words, one wording per problem
REWORDINGS = ("Tell me the word [{cue}]", "{cue}: which word?")
CUE_LETTERS = 4  # 26**4 distinct prompts: a broad distribution unless train_prompts narrows it


class TargetStringParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(
        "reward",
        min_length=1,
        max_length=64,
        pattern=r"^[a-z]+$",
        description="The string every reply should be (lowercase letters a-z).",
    )
    alternative: str = Field(
        "",
        max_length=64,
        pattern=r"^[a-z]*$",
        description="A second string that is just as correct ('' = none): two equally rewarded "
        "answer modes. Under prior 'plus' each demonstration shows one of the two, by a fair "
        "coin per problem; 'minus' shows neither.",
    )
    decoy: str = Field(
        "",
        max_length=64,
        pattern=r"^[a-z]*$",
        description="A wrong answer that, under prior 'plus', the warm start's flawed "
        "demonstrations (model.pretrain_flawed_share of them) show instead of random strings "
        "('' = random strings): a base that holds one wrong belief with a set probability, as "
        "in Co-RL's two-answer analysis.",
    )
    prior: Literal["plain", "plus", "minus"] = Field(
        "plus",
        description="What the warm start shows the model: 'plain' random strings of the "
        "target's length (the target only by chance, 26**-len), 'plus' (SFT+) the target, "
        "with model.pretrain_flawed_share of them random strings instead, 'minus' (SFT-) "
        "random strings that are never the target.",
    )
    train_prompts: int = Field(
        0,
        ge=0,
        description="Train on this many distinct prompts (a narrow set; eval stays broad, on "
        "fresh cues); 0 draws a fresh cue for every train problem.",
    )


class TargetStringTask(GeneratedTask):
    """Reply with a fixed target string; the warm start sets how likely the base says it."""

    name = "target_string"
    verifier = "exact_reply"
    Params = TargetStringParams
    # examples/target_string.toml (benchmarks/methods/demystifying.py).
    recommended_tiny = {
        "model.pretrain_steps": 150,
        "model.pretrain_batch_size": 32,
        "rollout.max_new_tokens": 10,
        "train.lr": 3e-4,
    }

    def __init__(self, params: TargetStringParams, seed: int, eval_size: int):
        if params.alternative == params.target:
            raise ValueError(
                f"target_string: task.alternative equals task.target ({params.target!r}); "
                "choose a different string, or '' for a single target"
            )
        if params.decoy and params.decoy in (params.target, params.alternative):
            raise ValueError(
                f"target_string: task.decoy {params.decoy!r} is a correct answer; a decoy must be "
                "wrong: choose another string"
            )
        self.params = params
        super().__init__(seed, eval_size)
        self._pool = EpochOrder(self._narrow_cues(), seed) if params.train_prompts else None

    def _narrow_cues(self) -> list[str]:
        cues: dict[str, None] = {}  # insertion-ordered set
        for index in range(self.max_attempts):
            cues.setdefault(super().train_problem(index).metadata["cue"])
            if len(cues) == self.params.train_prompts:
                return list(cues)
        raise ValueError(
            f"target_string: found only {len(cues)} distinct train prompts for "
            f"task.train_prompts={self.params.train_prompts}; lower it"
        )

    def _filler(self, rng: random.Random) -> str:
        """A random string of the target's length (never a target under prior 'minus')."""
        targets = (self.params.target, self.params.alternative)
        while True:
            text = "".join(rng.choice(LETTERS) for _ in self.params.target)
            if self.params.prior != "minus" or text not in targets:
                return text

    def _problem(self, cue: str, rng: random.Random) -> Problem:
        metadata = {"cue": cue, "filler": self._filler(rng)}
        if self.params.alternative:
            metadata["also_correct"] = [self.params.alternative]
            metadata["shown"] = rng.choice((self.params.target, self.params.alternative))
        return Problem(
            id=f"target_string-{cue}",
            prompt=f"Say the word ({cue})",
            answer=self.params.target,
            domain="target_string",
            metadata=metadata,
        )

    def paraphrase(self, problem: Problem) -> Problem:
        return reworded(problem, REWORDINGS, cue=problem.metadata["cue"])

    def draw(self, rng: random.Random) -> Problem:
        return self._problem("".join(rng.choice(LETTERS) for _ in range(CUE_LETTERS)), rng)

    def train_problem(self, index: int) -> Problem:
        if self._pool is None:
            return super().train_problem(index)
        # The warm start's random strings stay fresh per index even when the prompts repeat.
        return self._problem(self._pool[index], seeded_rng(self.seed, "train-narrow", index))

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        if self.params.prior == "plus" and not flawed:
            return problem.metadata.get("shown", self.params.target)
        if self.params.prior == "plus" and self.params.decoy:
            return self.params.decoy
        return problem.metadata["filler"]
