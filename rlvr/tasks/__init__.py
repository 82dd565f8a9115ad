"""Tasks: sources of Problems, with held-out eval sets and demonstrations for warm starts."""

from rlvr.tasks.arithmetic import ArithmeticTask
from rlvr.tasks.base import Task
from rlvr.tasks.countdown import CountdownTask
from rlvr.tasks.graph_walk import GraphWalkTask
from rlvr.tasks.guess_number import GuessNumberTask
from rlvr.tasks.jsonl import JsonlTask
from rlvr.tasks.linear_program import LinearProgramTask
from rlvr.tasks.mix import MixTask
from rlvr.tasks.nested_levels import NestedLevelsTask
from rlvr.tasks.nim import NimTask
from rlvr.tasks.product_sum import ProductSumTask
from rlvr.tasks.reasoning_gym import ReasoningGymTask
from rlvr.tasks.search_qa import SearchQATask
from rlvr.tasks.target_string import TargetStringTask
from rlvr.tasks.tree_search import TreeSearchTask

__all__ = [
    "TASKS",
    "ArithmeticTask",
    "CountdownTask",
    "GraphWalkTask",
    "GuessNumberTask",
    "JsonlTask",
    "LinearProgramTask",
    "MixTask",
    "NestedLevelsTask",
    "NimTask",
    "ProductSumTask",
    "ReasoningGymTask",
    "SearchQATask",
    "TargetStringTask",
    "Task",
    "TreeSearchTask",
]

TASKS: dict[str, type[Task]] = {
    "arithmetic": ArithmeticTask,
    "countdown": CountdownTask,
    "graph_walk": GraphWalkTask,
    "guess_number": GuessNumberTask,
    "jsonl": JsonlTask,
    "linear_program": LinearProgramTask,
    "mix": MixTask,
    "nested_levels": NestedLevelsTask,
    "nim": NimTask,
    "product_sum": ProductSumTask,
    "reasoning_gym": ReasoningGymTask,
    "search_qa": SearchQATask,
    "target_string": TargetStringTask,
    "tree_search": TreeSearchTask,
}
