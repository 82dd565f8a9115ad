"""distributed.backend's names: each backend builds the trainer's two seams, its rollout source
and its update group (distributed/base.py). Ray's modules load only when Ray is chosen."""

from __future__ import annotations

from rlvr.config import Config
from rlvr.distributed.base import RolloutSource, UpdateGroup
from rlvr.distributed.local import InProcessRollout, LocalUpdate
from rlvr.registry import lookup
from rlvr.rollout.build import build_engine, make_runner, sampling_params
from rlvr.rollout.replay import ReplayEngine


class Local:
    """In-process (the default): this process samples with its own engine and runs the update."""

    @staticmethod
    def source(cfg: Config, model, tokenizer, components, model_path: str) -> RolloutSource:
        engine = build_engine(cfg, model, tokenizer, model_path)
        methods = components.methods
        evaluating = methods.engine(engine, model, tokenizer, training=False)
        sampler = methods.engine(engine, model, tokenizer, training=True)
        if cfg.rollout.replay:
            sampler = ReplayEngine(cfg.rollout.replay, tokenizer, tokenizer.eos_token_id)
        runner = make_runner(cfg, model, tokenizer, components, engine=sampler)
        evaluator = (
            make_runner(cfg, model, tokenizer, components, trees=False, engine=evaluating)
            if sampler is not evaluating or cfg.rollout.tree_width
            else runner
        )  # eval measures the policy alone: no tree, no weak branches, no logged replies
        return InProcessRollout(engine, runner, evaluator)

    @staticmethod
    def update_group(cfg: Config, tokenizer, model_path: str, source, model) -> UpdateGroup:
        return LocalUpdate(cfg, model)


class Ray:
    """Ray: rollout workers (each builds its own engine and runners from the same config), and
    distributed.trainer_ranks - 1 trainer ranks beside this process."""

    @staticmethod
    def source(cfg: Config, model, tokenizer, components, model_path: str) -> RolloutSource:
        from rlvr.distributed.ray_partial import PartialRayRollout
        from rlvr.distributed.ray_rollout import RayRollout

        source = PartialRayRollout if cfg.rollout.partial_tokens else RayRollout
        return source(cfg, tokenizer, model_path, sampling_params(cfg))

    @staticmethod
    def update_group(cfg: Config, tokenizer, model_path: str, source, model) -> UpdateGroup:
        """The trainer ranks are placed where the rollout workers' placement group set aside
        room for them; with one rank, this process alone."""
        if cfg.distributed.trainer_ranks < 2:
            return LocalUpdate(cfg, model)
        from rlvr.distributed.ray_trainer import RayUpdateGroup

        return RayUpdateGroup(
            cfg, tokenizer, model_path, source.trainer_bundles, source.actor_options, model
        )


BACKENDS = {"local": Local, "ray": Ray}


def build_rollout_source(
    cfg: Config, model, tokenizer, components, model_path: str
) -> RolloutSource:
    """Where samples come from: the rollout source of distributed.backend (BACKENDS)."""
    backend = lookup(BACKENDS, cfg.distributed.backend, "distributed.backend")
    return backend.source(cfg, model, tokenizer, components, model_path)


def build_update_group(
    cfg: Config, tokenizer, model_path: str, source: RolloutSource, model
) -> UpdateGroup:
    """Who runs the policy update of `model` and holds its optimizer, by distributed.backend."""
    backend = lookup(BACKENDS, cfg.distributed.backend, "distributed.backend")
    return backend.update_group(cfg, tokenizer, model_path, source, model)
