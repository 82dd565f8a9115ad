"""Environments: the reset/step protocol and the built-in envs."""

from rlvr.envs.base import Env
from rlvr.envs.guess_number import GuessNumberEnv
from rlvr.envs.nim import NimEnv
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.envs.tool_env import ToolEnv
from rlvr.envs.tree_search import TreeSearchEnv

ENVS = {
    "single_turn": SingleTurnEnv,
    "guess_number": GuessNumberEnv,
    "nim": NimEnv,
    "tool": ToolEnv,
    "tree_search": TreeSearchEnv,
}

__all__ = ["ENVS", "Env", "GuessNumberEnv", "NimEnv", "SingleTurnEnv", "ToolEnv", "TreeSearchEnv"]
