"""rlvr: post-train language models with reinforcement learning from verifiable rewards."""

from rlvr.api import Run, evaluate, load_run, run

__all__ = ["Run", "evaluate", "load_run", "run"]
__version__ = "0.1.0"
