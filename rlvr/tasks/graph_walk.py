"""Walk a graph given in the prompt: the vertex reached after k hops, rewarded on that answer only,
so whether the reply's intermediate vertices become a real walk is left to RL (arXiv 2601.15158)."""

from __future__ import annotations

import random
import string
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.rewards.answers import extract_answer
from rlvr.tasks.base import GeneratedTask, seeded_rng
from rlvr.types import Problem


class GraphWalkParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vertices: int = Field(
        6,
        ge=3,
        le=26,
        description="Vertices per graph, named a, b, c, ...; each graph is one random cycle "
        "through all of them, its edges listed in the prompt by source vertex.",
    )
    hops: int = Field(
        3,
        ge=2,
        description="Hops of a long instance; every eval problem is one. Must be below "
        "task.vertices, so a walk never comes back to its start.",
    )
    short_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of training problems that take one hop (the paper's simple "
        "instances); the rest take task.hops.",
    )
    layout: Literal["text", "tokens"] = Field(
        "text",
        description="'text': the edges written as characters, the reply the intermediate "
        "vertices then '#### answer' (verifier exact). 'tokens', the paper's layout for a model "
        "trained from scratch: each edge one token ('c>a'), so one attention step can look up a "
        "vertex's successor, and the reply the walk's vertices with no separators, graded on "
        "its character number hops (verifier exact_at; what follows is ignored), so no marker "
        "has to be learned first.",
    )


def successors(problem: Problem) -> dict[str, str]:
    return dict(edge.split(">") for edge in problem.metadata["edges"].split())


def steps_followed(problem: Problem, reply: str) -> float:
    """Share of the reply's hops, the intermediate vertices then the marked answer, that follow
    an edge from the vertex before (the first from the start); 0 when it names another number of
    vertices than the problem has hops: how far the reply is a walk, whatever its answer. In the
    tokens layout the walk is the reply's first `hops` characters."""
    hops = problem.metadata["hops"]
    if "answer_at" in problem.metadata:
        walk = list(reply[:hops])
    else:
        answer = extract_answer(reply)
        shown = reply.split("####")[0].split()
        walk = [*shown, answer] if answer is not None else shown
    if len(walk) != hops:
        return 0.0
    edge = successors(problem)
    previous = [problem.metadata["start"], *walk[:-1]]
    return sum(edge.get(a) == b for a, b in zip(previous, walk)) / hops


class GraphWalkTask(GeneratedTask):
    """The vertex reached after k hops on a cycle given in the prompt; reward on the answer."""

    name = "graph_walk"
    verifier = "exact"
    Params = GraphWalkParams
    # examples/graph_walk.toml (benchmarks/methods/graph_walk.py).
    recommended_tiny = {
        "model.pretrain_steps": 100,
        "model.pretrain_batch_size": 32,
        "rollout.max_new_tokens": 12,
        "train.lr": 2e-4,
    }

    def __init__(self, params: GraphWalkParams, seed: int, eval_size: int):
        if params.hops >= params.vertices:
            raise ValueError(
                f"graph_walk: task.hops={params.hops} must be below task.vertices="
                f"{params.vertices}, or a walk returns to its start; lower hops or add vertices"
            )
        self.params = params
        tokens = params.layout == "tokens"
        self.verifier = "exact_at" if tokens else "exact"
        names = string.ascii_lowercase[: params.vertices]
        self.added_tokens = [f"{a}>{b}" for a in names for b in names if a != b] if tokens else []
        super().__init__(seed, eval_size)

    def _problem(self, rng: random.Random, hops: int) -> Problem:
        names = list(string.ascii_lowercase[: self.params.vertices])
        rng.shuffle(names)
        edge = {a: names[(i + 1) % len(names)] for i, a in enumerate(names)}
        # listed by source vertex, so looking one up is reading a slot the vertex names
        edges = [f"{a}>{edge[a]}" for a in sorted(edge)]
        start = rng.choice(names)
        walk = [start]
        for _ in range(hops):
            walk.append(edge[walk[-1]])
        listed = " ".join(edges)
        # The warm start's reply: the walk's shape (hops - 1 vertices, then the answer) with
        # vertices drawn at random, so the base knows the format but not how to follow edges.
        filler = [rng.choice(names) for _ in range(hops)]
        metadata = {"edges": listed, "start": start, "hops": hops, "filler": filler}
        if self.params.layout == "tokens":
            metadata["answer_at"] = hops
        return Problem(
            id=f"graph_walk-{listed}-{start}-{hops}",
            prompt=f"{listed}\nFrom {start}, {hops} hops",
            answer=walk[-1],
            domain=f"graph_walk_{hops}hop",
            metadata=metadata,
        )

    def draw(self, rng: random.Random) -> Problem:
        return self._problem(rng, self.params.hops)

    def train_problem(self, index: int) -> Problem:
        if seeded_rng(self.seed, "short", index).random() >= self.params.short_share:
            return super().train_problem(index)
        return self._problem(seeded_rng(self.seed, "train-short", index), 1)  # never eval's

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        """The format with random vertices; `flawed` changes nothing: every demonstration is
        uninformed, and the content of the walk is RL's to learn."""
        if "answer_at" in problem.metadata:
            return "".join(problem.metadata["filler"])
        *shown, answer = problem.metadata["filler"]
        return " ".join([*shown, f"#### {answer}"])
