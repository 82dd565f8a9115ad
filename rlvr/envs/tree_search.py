"""Tree search: walk a random k-ary tree one move at a time, seeing only the walk so far, to reach
a hidden goal leaf (Yang et al., "Agentic Transformers Provably Learn to Search via RL")."""

from __future__ import annotations

import random
import re

from rlvr.types import Message, Problem, StepResult

# A reply ends with its move: a child's index, or "back" to the parent.
_MOVE = re.compile(r"(back|\d)\W*$")
BACK = "back"


def random_tree(
    rng: random.Random, branching: int, depth: int, branch_prob: float
) -> tuple[list[str], str]:
    """(node paths, goal path) of a random tree: a path is the child indices from the root ("" is
    the root). Above `depth` each of a node's `branching` child slots is filled with probability
    `branch_prob`; the goal is a leaf at `depth` whose ancestors are forced into the tree. Nodes
    without children that are not the goal are dead ends."""
    goal = "".join(str(rng.randrange(branching)) for _ in range(depth))
    nodes, frontier = [""], [""]
    while frontier:
        path = frontier.pop(0)
        if len(path) == depth:
            continue
        for j in map(str, range(branching)):
            child = path + j
            if goal.startswith(child) or rng.random() < branch_prob:
                nodes.append(child)
                frontier.append(child)
    return nodes, goal


def children(nodes: set[str], path: str, branching: int) -> list[str]:
    """Indices (as digits) of the children of `path` in the tree."""
    return [j for j in map(str, range(branching)) if path + j in nodes]


def describe(nodes: set[str], path: str, branching: int) -> str:
    """What the walker sees at `path`: where it is ("r" then the path) and its children's
    indices, or that it is a dead end, e.g. "r01: 0 1" or "r10: dead end"."""
    below = children(nodes, path, branching)
    return f"r{path}: {' '.join(below) if below else 'dead end'}"


def legal_moves(nodes: set[str], path: str, branching: int) -> list[str]:
    """The children's indices, and "back" unless at the root."""
    return children(nodes, path, branching) + ([BACK] if path else [])


class TreeSearchEnv:
    """Walk a random tree from its root to a hidden goal leaf, one move per reply.

    The tree is `problem.metadata` (`nodes`, `branching`), the goal `problem.answer`. Each reply
    ends with a child's index or "back"; the observation says where the walk now is and what
    lies below (an illegal move stays put, says so, and costs the move). Reaching the goal ends
    the episode with reward `gamma ** (moves - 1)`; `max_moves` moves without it end it with 0."""

    def __init__(self, max_moves: int, gamma: float = 1.0):
        self.max_moves, self.gamma = max_moves, gamma

    def reset(self, problem: Problem) -> list[Message]:
        self.nodes = set(problem.metadata["nodes"])
        self.branching = int(problem.metadata["branching"])
        self.goal, self.path, self.moves = problem.answer, "", 0
        self.visited = {""}
        self.revisits = 0  # moves down into a node entered before: what DFS never makes
        return problem.messages()

    def step(self, action_text: str) -> StepResult:
        self.moves += 1
        match = _MOVE.search(action_text)
        move = match.group(1) if match else None
        legal = move in legal_moves(self.nodes, self.path, self.branching)
        if legal and move == BACK:
            self.path = self.path[:-1]
        elif legal:
            self.path += move
            self.revisits += self.path in self.visited
            self.visited.add(self.path)
        info = {"moves": self.moves, "revisits": self.revisits}
        if self.path == self.goal:
            reward = self.gamma ** (self.moves - 1)
            return StepResult(None, reward, True, {**info, "correct": True, "status": "ok"})
        if self.moves >= self.max_moves:
            return StepResult(None, 0.0, True, {**info, "correct": False, "status": "wrong"})
        seen = describe(self.nodes, self.path, self.branching)
        return StepResult(seen if legal else f"invalid; {seen}", 0.0, False, info)
