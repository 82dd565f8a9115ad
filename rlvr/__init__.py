"""rlvr: post-train language models with reinforcement learning from verifiable rewards."""

__all__ = ["Run", "analyze", "evaluate", "load_run", "run"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # the Python API (rlvr/api.py) loads on first use, so `import rlvr` loads nothing else
    if name in __all__:
        from rlvr import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
