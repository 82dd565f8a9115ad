"""Tree search as a task: random trees whose depth rises with training success (a curriculum), and
random-walk demonstrations that teach the move format but no search strategy."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rlvr.envs.tree_search import BACK, TreeSearchEnv, describe, legal_moves, random_tree
from rlvr.tasks.base import seeded_rng
from rlvr.types import Message, Problem, Trajectory


class TreeSearchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    branching: int = Field(2, ge=2, le=9, description="Child slots per node (k of the k-ary tree).")
    branch_prob: float = Field(
        0.7,
        gt=0,
        le=1,
        description="Chance each child slot off the goal's path holds a node (1: complete trees).",
    )
    min_depth: int = Field(1, ge=1, le=12, description="Shallowest training tree (goal depth).")
    start_depth: int = Field(
        1,
        ge=1,
        le=12,
        description="The curriculum's deepest training tree once RL starts (the warm start "
        "sees min_depth..max_depth); training draws depths min_depth..current uniformly. Equal "
        "to max_depth: no curriculum.",
    )
    max_depth: int = Field(
        2, ge=1, le=12, description="Deepest training tree the curriculum reaches."
    )
    advance_at: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Training success on the current deepest trees (one step's episodes) at "
        "which the curriculum adds one level.",
    )
    eval_depths: list[int] = Field(
        [3, 4],
        min_length=1,
        description="Goal depths of the eval trees, in turn (deeper than training's: held out).",
    )
    max_moves: int = Field(
        24,
        ge=1,
        description="Moves per episode before it fails; keep rollout.max_turns at least this.",
    )
    gamma: float = Field(
        1.0, gt=0, le=1, description="Discount of the goal reward per move before the last."
    )


class DepthCurriculum:
    """The deepest tree training draws. Until training reports outcomes it is `max_depth`, so the
    warm start's demonstrations show the format at every training depth; the first outcomes
    set it to `start_depth`, and it rises by one each time a step's success on trees of that
    depth reaches `advance_at`, up to `max_depth`."""

    def __init__(self, start_depth: int, max_depth: int, advance_at: float):
        self.start_depth, self.max_depth, self.advance_at = start_depth, max_depth, advance_at
        self.depth, self.started = max_depth, False

    def observe(self, trajectories: list[Trajectory]) -> dict[str, float]:
        if not self.started:
            self.depth, self.started = self.start_depth, True
        deepest = [t.correct for t in trajectories if t.problem.metadata["depth"] == self.depth]
        success = sum(deepest) / len(deepest) if deepest else 0.0
        if deepest and success >= self.advance_at and self.depth < self.max_depth:
            self.depth += 1
        return {"curriculum/depth": float(self.depth), "curriculum/success": success}

    def state_dict(self) -> dict[str, int]:
        return {"depth": self.depth, "started": self.started}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.depth, self.started = state["depth"], state["started"]


class TreeSearchTask:
    """Find a hidden goal leaf in a random tree, seeing only the walk so far (multi-turn).

    Trained on shallow trees under a depth curriculum, evaluated on deeper ones."""

    name = "tree_search"
    verifier = None  # the env scores the episode
    Params = TreeSearchParams
    # examples/tree_search.toml: one short move per turn, up to max_moves (24) turns.
    recommended_tiny = {
        "rollout.batch_size": 64,
        "rollout.max_new_tokens": 8,
        "rollout.max_turns": 24,
        "rollout.max_total_tokens": 512,
    }

    def __init__(self, params: TreeSearchParams, seed: int, eval_size: int):
        p = params
        if not p.min_depth <= p.start_depth <= p.max_depth:
            raise ValueError(
                f"task.min_depth = {p.min_depth}, task.start_depth = {p.start_depth} and "
                f"task.max_depth = {p.max_depth} must rise in that order; fix: e.g. "
                f"task.start_depth={p.min_depth} task.max_depth={max(p.max_depth, p.min_depth)}"
            )
        if not all(1 <= d <= 12 for d in p.eval_depths):
            raise ValueError(
                f"task.eval_depths = {p.eval_depths}: each depth must be 1 to 12; fix: e.g. "
                "task.eval_depths=[3, 4]"
            )
        self.params, self.seed, self.eval_size = params, seed, eval_size
        self.curriculum = DepthCurriculum(params.start_depth, params.max_depth, params.advance_at)

    def _problem(self, id: str, depth: int, *parts: object) -> Problem:
        p = self.params
        nodes, goal = random_tree(seeded_rng(self.seed, *parts), p.branching, depth, p.branch_prob)
        prompt = f"Find the goal leaf. {describe(set(nodes), '', p.branching)}"
        metadata = {"depth": depth, "branching": p.branching, "nodes": nodes}
        return Problem(id=id, prompt=prompt, answer=goal, domain="tree_search", metadata=metadata)

    def train_problem(self, index: int) -> Problem:
        """Deterministic in (seed, index, curriculum depth); a resumed run restores the depth.
        The first step's problems, drawn before any outcome, span every training depth."""
        depth = seeded_rng(self.seed, "depth", index).randint(
            self.params.min_depth, self.curriculum.depth
        )
        return self._problem(f"tree-train-{index}", depth, "train", index)

    def eval_problems(self) -> list[Problem]:
        depths = self.params.eval_depths
        return [
            self._problem(f"tree-eval-{i}", depths[i % len(depths)], "eval", i)
            for i in range(self.eval_size)
        ]

    def make_env(self, reward=None, verifier=None) -> TreeSearchEnv:
        return TreeSearchEnv(self.params.max_moves, self.params.gamma)

    def demonstration(self, problem: Problem, flawed: bool = False) -> list[Message]:
        """Replies "go j" or "back", each a uniformly random legal move, with the env's
        observations between them, until the goal or the move budget: the format without a
        strategy (a random walk revisits), so RL has the search to learn. `flawed` changes
        nothing, as there is no strategy to get wrong."""
        rng = seeded_rng("walk", problem.id)
        nodes, branching = set(problem.metadata["nodes"]), problem.metadata["branching"]
        env = self.make_env()
        env.reset(problem)
        messages: list[Message] = []
        while True:
            move = rng.choice(legal_moves(nodes, env.path, branching))
            messages.append(
                {"role": "assistant", "content": BACK if move == BACK else f"go {move}"}
            )
            result = env.step(messages[-1]["content"])
            if result.done:
                return messages
            messages.append({"role": "user", "content": result.observation})

    def observe(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """Training's outcomes, which move the depth curriculum; returns its metrics."""
        return self.curriculum.observe(trajectories)

    def state_dict(self) -> dict[str, int]:
        return self.curriculum.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.curriculum.load_state_dict(state)
