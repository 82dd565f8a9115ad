"""Trainer ranks on Ray: replicated ranks stay equal to rank 0, sharded (FSDP2) ranks take the
same steps while each holds half the training state, through a checkpoint and resume, and a rank
that fails mid-update stops the run with its own error."""

import pytest
import torch

from rlvr.config import load_config
from rlvr.distributed.ray_trainer import TrainerRankError
from rlvr.train.trainer import Trainer

# the same small run as the rollout tests, in one local Ray for the module
from .test_ray_rollout import SMALL, ray_session  # noqa: F401

# One worker runs every test of the digits=2 warm start (this, the e2e runs), so it is built
# once and no worker idles on another's lock; and never are two local Rays up at once.
pytestmark = pytest.mark.xdist_group("digits2")

TWO_RANKS = [
    *SMALL,
    "distributed.trainer_ranks=2",
    "distributed.rollout_workers=1",
    "train.micro_batch_size=4",
]


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def test_replicated_ranks_stay_equal_to_rank_zero(fast_overrides):
    trainer = Trainer(load_config(None, [*fast_overrides, *TWO_RANKS, "train.steps=2"]))
    start = [float(p.detach().double().sum()) for p in trainer.model.parameters()]
    try:
        for _ in range(2):
            trainer.step()
            trainer.state["step"] += 1
        rank0 = float(sum(p.detach().double().sum() for p in trainer.model.parameters()))
        assert trainer.updater.checksums() == [pytest.approx(rank0, rel=1e-12)]
        assert [float(p.detach().double().sum()) for p in trainer.model.parameters()] != start
    finally:
        trainer.updater.close()
        trainer.source.close()


def test_fsdp_ranks_take_the_replicated_steps_and_resume_exactly(fast_overrides):
    """Three steps replicated against two FSDP2 steps, a checkpoint (the optimizer state gathered
    from both shards), and a resumed third step: the same weights. Without the gathered Adam
    moments the third step would move differently."""
    # an FSDP2 update does not share prompts; neither does the replicated run it is held to, so
    # both sum each micro-batch's gradients in the same order
    replicated = Trainer(load_config(None, [*fast_overrides, *TWO_RANKS, "train.steps=3",
                                            "train.share_prompt=false"]))  # fmt: skip
    replicated.run()
    base = [*fast_overrides, *TWO_RANKS, "distributed.trainer_sharding=fsdp", "train.save_every=2",
            "log.name=fsdp"]  # fmt: skip
    cut = Trainer(load_config(None, [*base, "train.steps=2"]))
    assert cut.updater.held_shares() == [pytest.approx(0.5, abs=0.01)] * 2
    assert any("FSDP2 over 2 ranks" in line for line in cut.updater.describe())
    initial = weights(cut)
    cut.run()
    resumed = Trainer(load_config(None, [*base, "train.steps=3"]), resume=cut.run_dir.path)
    resumed.run()
    expected, got = weights(replicated), weights(resumed)
    assert any(not torch.equal(initial[k], got[k]) for k in got)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-6, msg=name)


def test_a_rank_that_fails_mid_update_stops_the_run_with_its_error(fast_overrides):
    """Rank 0 would otherwise wait in the update's first collective for the process group's
    whole timeout (distributed.rollout_timeout), then fail with gloo's error, not the rank's."""
    trainer = Trainer(load_config(None, [
        *fast_overrides, *TWO_RANKS, "train.steps=2", "log.name=failing",
        "algo.loss=tests.distributed.rank_faults:fails_beyond_rank_zero",
    ]))  # fmt: skip
    with pytest.raises(
        TrainerRankError, match=r"trainer rank 1 failed .*\(RuntimeError: rank 1's loss raised\)"
    ):
        trainer.run()
    assert trainer.state["step"] == 0
