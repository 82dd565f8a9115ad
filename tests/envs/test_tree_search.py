import random

import pytest

from rlvr.envs.tree_search import TreeSearchEnv, describe, random_tree
from rlvr.types import Problem

# r -> 0 (dead end), 1 -> 10 (goal), 11 (dead end)
NODES = ["", "0", "1", "10", "11"]


def problem(nodes=NODES, goal="10"):
    prompt = f"Find the goal leaf. {describe(set(nodes), '', 2)}"
    return Problem("t", prompt, answer=goal, metadata={"branching": 2, "nodes": nodes})


@pytest.mark.parametrize("depth", [1, 3, 5])
def test_random_trees_hold_the_goal_path_and_nothing_deeper(depth):
    for seed in range(50):
        nodes, goal = random_tree(random.Random(seed), 3, depth, 0.5)
        assert len(goal) == depth and goal in nodes
        assert all(n[:-1] in nodes for n in nodes if n)  # every node hangs from a parent
        assert max(map(len, nodes)) == depth and len(set(nodes)) == len(nodes)
    assert random_tree(random.Random(7), 2, 4, 0.5) == random_tree(random.Random(7), 2, 4, 0.5)
    assert len(random_tree(random.Random(0), 2, 3, 1.0)[0]) == 2**4 - 1  # complete


def test_observations_moves_and_the_discounted_goal_reward():
    env = TreeSearchEnv(max_moves=10, gamma=0.5)
    assert env.reset(problem())[0]["content"] == "Find the goal leaf. r: 0 1"
    steps = [env.step(reply) for reply in ["go 0", "back", "back", "go 2", "go 1", "go 1"]]
    assert [s.observation for s in steps[:5]] == [
        "r0: dead end",
        "r: 0 1",
        "invalid; r: 0 1",  # no parent above the root
        "invalid; r: 0 1",  # no third child
        "r1: 0 1",
    ]
    assert steps[5].observation == "r11: dead end"
    last = env.step("go 0, then back")  # the move is the reply's last word
    assert last.observation == "r1: 0 1"
    final = env.step("go 0")
    assert final.done and final.info == {"moves": 8, "revisits": 0, "correct": True, "status": "ok"}
    assert final.reward == 0.5**7 and all(s.reward == 0 and not s.done for s in steps)


def test_the_move_budget_ends_a_walk_that_misses_the_goal():
    env = TreeSearchEnv(max_moves=3)
    env.reset(problem())
    steps = [env.step(reply) for reply in ["go 0", "back", "go 0"]]
    assert steps[-1].done and steps[-1].reward == 0.0
    assert steps[-1].info == {"moves": 3, "revisits": 1, "correct": False, "status": "wrong"}
    env.reset(problem())  # a new episode starts over at the root
    assert env.step("go 1").observation == "r1: 0 1" and env.revisits == 0


def parse(observation: str) -> tuple[str, list[str]]:
    """(path, children) from "r01: 0 1" or "r01: dead end"."""
    head, below = observation.removeprefix("invalid; ").split(": ")
    return head.removeprefix("r"), [] if below == "dead end" else below.split()


def dfs_reply(history: list[str]) -> str:
    """Depth-first search from the observations alone: the first child not entered yet, else back."""
    path, below = parse(history[-1])
    seen = {parse(observation)[0] for observation in history}
    fresh = [j for j in below if path + j not in seen]
    return f"go {fresh[0]}" if fresh else "back"


def test_the_observations_suffice_for_depth_first_search_to_reach_every_goal():
    for seed in range(100):
        nodes, goal = random_tree(random.Random(seed), 2, 4, 0.7)
        env = TreeSearchEnv(max_moves=2 * len(nodes))  # DFS crosses each edge at most twice
        history = [env.reset(problem(nodes, goal))[0]["content"].split(". ", 1)[1]]
        while True:
            result = env.step(dfs_reply(history))
            if result.done:
                break
            history.append(result.observation)
        assert result.info["correct"] and result.info["revisits"] == 0
