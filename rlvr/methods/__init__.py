"""Research methods, one module each, that act on the loop through the hooks of
rlvr/train/hooks.py: `METHODS` maps a name under `methods.<name>` in the config to its class."""

from __future__ import annotations

from rlvr.config import Config
from rlvr.methods.c3po import C3PO
from rlvr.methods.direct_opd import DirectOPD
from rlvr.methods.hierarchical import HierarchicalActorCritic
from rlvr.methods.parason import Parason
from rlvr.methods.poise import POISE
from rlvr.methods.repexp import RepExp
from rlvr.methods.rfpo import RFPO
from rlvr.methods.rgpo import RGPO
from rlvr.methods.river import River
from rlvr.methods.w2spo import W2SPO
from rlvr.registry import lookup, validate_params
from rlvr.train.hooks import Method, Methods


def build_methods(cfg: Config, task) -> Methods:
    """The methods of cfg.methods, each with its validated params, in config order; a method's
    own check refuses the settings it cannot run beside, before any work."""
    chosen: dict[str, Method] = {}
    for name, settings in cfg.methods.items():
        if settings is None:  # turned off, e.g. from the command line over a recipe
            continue
        cls = lookup(METHODS, name, "methods", group="rlvr.methods")
        params = validate_params(cls.Params, settings, f"methods.{name}")
        cls.check(params, cfg, task)
        chosen[name] = cls(params, cfg)
    return Methods(chosen)


METHODS: dict[str, type[Method]] = {
    "c3po": C3PO,
    "direct_opd": DirectOPD,
    "hierarchical": HierarchicalActorCritic,
    "parason": Parason,
    "poise": POISE,
    "repexp": RepExp,
    "rfpo": RFPO,
    "rgpo": RGPO,
    "river": River,
    "w2spo": W2SPO,
}
