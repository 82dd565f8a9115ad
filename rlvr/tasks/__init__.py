"""Tasks: sources of Problems, with held-out eval sets and demonstrations for warm starts."""

from rlvr.tasks.arithmetic import ArithmeticTask
from rlvr.tasks.base import Task
from rlvr.tasks.countdown import CountdownTask
from rlvr.tasks.jsonl import JsonlTask
from rlvr.tasks.reasoning_gym import ReasoningGymTask

__all__ = ["TASKS", "ArithmeticTask", "CountdownTask", "JsonlTask", "ReasoningGymTask", "Task"]

TASKS: dict[str, type[Task]] = {
    "arithmetic": ArithmeticTask,
    "countdown": CountdownTask,
    "jsonl": JsonlTask,
    "reasoning_gym": ReasoningGymTask,
}
