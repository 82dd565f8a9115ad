"""A policy loss that raises on every trainer rank but rank 0, as a rank's own bug or a bad
share of the data would: the Ray trainer test loads it by `algo.loss=module:function`."""

import torch.distributed as dist

from rlvr.algos.losses import ppo_clip


def fails_beyond_rank_zero(inputs, algo):
    if dist.is_initialized() and dist.get_rank() > 0:
        raise RuntimeError(f"rank {dist.get_rank()}'s loss raised")
    return ppo_clip(inputs, algo)
