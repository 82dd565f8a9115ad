"""distributed.backend picks a backend from BACKENDS, whose parts fill the two seams of
distributed/base.py."""

import pytest

from rlvr.config import load_config
from rlvr.distributed.backends import Ray, build_rollout_source, build_update_group
from rlvr.distributed.base import UpdateGroup
from rlvr.distributed.local import InProcessRollout, LocalUpdate
from rlvr.distributed.ray_trainer import RayUpdateGroup
from rlvr.train.components import build_components

SEAM = [name for name, value in vars(UpdateGroup).items() if callable(value) and name[0] != "_"]


def test_the_local_backend_samples_and_updates_in_this_process(tiny_model, tokenizer):
    cfg = load_config(None, [])
    source = build_rollout_source(cfg, tiny_model, tokenizer, build_components(cfg), "unused")
    assert isinstance(source, InProcessRollout)
    updater = build_update_group(cfg, tokenizer, "unused", source, tiny_model)
    assert isinstance(updater, LocalUpdate)
    assert updater.optimizer.param_groups[0]["params"]


def test_ray_with_one_trainer_rank_updates_in_this_process(tiny_model):
    cfg = load_config(None, ["distributed.backend=ray"])
    assert isinstance(Ray.update_group(cfg, None, "unused", None, tiny_model), LocalUpdate)


@pytest.mark.parametrize("group", [LocalUpdate, RayUpdateGroup])
def test_each_update_group_has_the_seams_methods(group):
    assert SEAM == ["load", "update", "scale_lr", "describe", "close"]
    assert all(callable(getattr(group, name, None)) for name in SEAM)
