"""What `rlvr list` prints: every registry's names and first doc lines, cached in catalog.json
so that listing them imports no torch (a test keeps the cache equal to the registries)."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

CACHE = Path(__file__).with_name("catalog.json")
KINDS = (
    "advantages",
    "losses",
    "kl",
    "aggregations",
    "rewards",
    "tasks",
    "envs",
    "engines",
    "backends",
    "methods",
    "runners",
    "presets",
)
PLUGIN_GROUPS = {
    kind: f"rlvr.{kind}"
    for kind in ("advantages", "losses", "rewards", "tasks", "engines", "methods", "runners")
}


def registry(kind: str) -> dict:
    """The live registry of `kind` (imports the modules that fill it)."""
    if kind == "advantages":
        from rlvr.algos.advantages import ADVANTAGES as found
    elif kind == "losses":
        from rlvr.algos.losses import LOSSES as found
    elif kind == "kl":
        from rlvr.algos.kl import KL_ESTIMATORS as found
    elif kind == "aggregations":
        from rlvr.algos.losses import AGGREGATIONS as found
    elif kind == "rewards":
        from rlvr.rewards import REWARDS as found
    elif kind == "tasks":
        from rlvr.tasks import TASKS as found
    elif kind == "envs":
        from rlvr.envs import ENVS as found
    elif kind == "engines":
        from rlvr.rollout import ENGINES as found
    elif kind == "backends":
        from rlvr.distributed.backends import BACKENDS as found
    elif kind == "methods":
        from rlvr.methods import METHODS as found
    elif kind == "runners":
        from rlvr.methods.runners import RUNNERS as found
    else:
        from rlvr.models.tiny import PRESETS

        found = {
            name: f"hidden {h}, layers {n}, heads {a}, mlp {f}"
            for name, (h, n, a, f) in PRESETS.items()
        }
    return found


def build() -> dict[str, dict[str, str]]:
    """The catalog from the live registries (what catalog.json must hold)."""
    from rlvr.registry import describe

    return {kind: dict(describe(registry(kind))) for kind in KINDS}


def rows(kind: str) -> list[tuple[str, str]]:
    """(name, doc) of `kind`: the cached built-ins, then installed plugins by entry point."""
    built_in = list(json.loads(CACHE.read_text())[kind].items())
    group = PLUGIN_GROUPS.get(kind)
    plugins = (
        [(ep.name, f"plugin: {ep.value}") for ep in entry_points(group=group)] if group else []
    )
    return built_in + sorted(plugins)


if __name__ == "__main__":  # python -m rlvr.catalog rewrites the cache
    CACHE.write_text(json.dumps(build(), indent=1) + "\n")
