"""The methods of several policies: `RUNNERS` maps a name to a runner that drives several Trainers
(through rlvr/train/group.py), and `choose_runner` picks the one a config asks for."""

from __future__ import annotations

from importlib.metadata import entry_points

from rlvr.config import Config, ConfigError
from rlvr.methods.cohort import Cohort
from rlvr.methods.debate import Debate
from rlvr.methods.rspo import RSPO
from rlvr.registry import describe
from rlvr.train.trainer import Trainer


def registered() -> dict[str, type]:
    """RUNNERS, then the runners installed packages register under the entry-point group
    `rlvr.runners` (a built-in name wins, as in registry.lookup)."""
    found = dict(RUNNERS)
    for ep in entry_points(group="rlvr.runners"):
        if ep.name not in found:
            found[ep.name] = ep.load()
    return found


def choose_runner(cfg: Config) -> type:
    """What trains `cfg`: the registered runner whose `chosen(cfg)` is true, else one Trainer.
    Two at once are refused before any work: each trains policies of its own."""
    found = registered()
    chosen = {name: cls for name, cls in found.items() if cls.chosen(cfg)}
    if len(chosen) > 1:
        asked = "\n  ".join(f"{name}: {doc}" for name, doc in describe(chosen))
        raise ConfigError(
            f"this config asks for {len(chosen)} runners of several policies, and a run is "
            f"trained by one:\n  {asked}\nfix: turn off the settings (in brackets) of all but one"
        )
    return next(iter(chosen.values()), Trainer)


RUNNERS: dict[str, type] = {
    "cohort": Cohort,
    "debate": Debate,
    "rspo": RSPO,
}
