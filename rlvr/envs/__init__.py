"""Environments: the reset/step protocol and the built-in envs."""

from rlvr.envs.base import Env
from rlvr.envs.single_turn import SingleTurnEnv

ENVS = {"single_turn": SingleTurnEnv}

__all__ = ["ENVS", "Env", "SingleTurnEnv"]
