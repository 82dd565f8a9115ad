"""RSPO (arXiv 2607.04713): an explorer copy of the policy trains on the env's process rewards;
its replies, relabelled with the outcome, join the main policy's outcome-rewarded batch as
off-policy rows that algo.tis weights by pi_main / pi_explorer."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from rlvr.config import Config, ConfigError, build_config
from rlvr.train.components import build_components
from rlvr.train.display import Display
from rlvr.train.group import TrainerGroup
from rlvr.train.policy import policy_path
from rlvr.train.trainer import Trainer
from rlvr.types import Trajectory

ROLES = ("main", "explorer")


def role_configs(cfg: Config, group_dir: Path) -> list[Config]:
    """The main policy's and the explorer's configs: the run's own, logging to `group_dir`/main
    and `group_dir`/explorer. The explorer starts from the main policy's weights and samples with
    seed + 1, so its first replies are not the main policy's own again."""
    data = cfg.model_dump(mode="json")
    data["algo"]["rspo_explorer"] = False  # each role is a plain run of its own
    data["log"].update(run_dir=str(group_dir), name="main")
    main = build_config(data)
    explorer = copy.deepcopy(data)
    explorer["log"]["name"] = "explorer"
    explorer["model"]["name"] = policy_path(main, build_components(main).task)
    explorer["train"]["seed"] = cfg.train.seed + 1
    return [main, build_config(explorer)]


def check_rspo(cfg: Config) -> None:
    """The explorer's rows are off-policy for the main policy: refuse a run that would not
    weight them."""
    if cfg.algo.tis == "off":
        raise ConfigError(
            "algo.rspo_explorer adds the explorer's replies to the main policy's batch, which "
            "need importance weights pi_main / pi_explorer; fix: algo.tis=token (or sequence)"
        )
    if cfg.distributed.backend != "local":
        raise ConfigError(
            "algo.rspo_explorer trains both policies in one process; fix: distributed.backend=local"
        )


def outcome_only(trajectory: Trajectory) -> Trajectory:
    """The episode with its process rewards dropped: every turn 0 but the last, which holds the
    outcome (1 if it was solved, else 0)."""
    turns = len(trajectory.turn_rewards)
    trajectory.turn_rewards = [0.0] * (turns - 1) + [float(trajectory.correct)]
    return trajectory


def relabelled_replay(explored: list[Trajectory], first_group: int) -> list[Trajectory]:
    """Copies of the explorer's episodes, outcome-rewarded, in groups numbered from
    `first_group` (after the main policy's own)."""
    replayed = []
    for trajectory in explored:
        copied = outcome_only(copy.deepcopy(trajectory))
        copied.group_id += first_group
        replayed.append(copied)
    return replayed


class RSPO(TrainerGroup):
    """RSPO (`algo.rspo_explorer`): the main policy and its explorer, stepped together, the
    explorer's replies relabelled into the main policy's batch."""

    @classmethod
    def chosen(cls, cfg: Config) -> bool:
        """A config that turns on the explorer trains the pair."""
        return cfg.algo.rspo_explorer

    def __init__(self, cfg: Config, resume: Path | None = None):
        self.cfg = cfg
        check_rspo(cfg)
        self.name_dir(cfg, "rspo", resume)
        configs = role_configs(cfg, self.path)
        step = self.open_dir(cfg, "rspo", resume, list(ROLES))
        self.display = Display(cfg.log.quiet)
        self.members: list[Trainer] = []
        self.adapters: list[str | None] = [None, None]  # each role holds its own model
        try:
            for role, role_cfg in zip(ROLES, configs):
                self.display.message(f"rspo {role}")
                role_dir = self.path / role if resume else None
                self.members.append(Trainer(role_cfg, resume=role_dir, resume_step=step))
        except BaseException:
            self.close()
            raise
        self.members[1].use_task(self.members[0].components.task)  # one draw of problems

    def train(self, stop_requested) -> dict:
        main, explorer = self.members
        for member in self.members:
            if member.state.get("final_eval") is None:
                member.begin()
        steps = self.cfg.train.steps
        with self.display.bar("rspo", steps, main.state["step"]) as bar:
            while main.state["step"] < steps:
                if stop_requested():
                    self.stop()
                start = time.perf_counter()
                own = main.sample()
                sampling, start = time.perf_counter() - start, time.perf_counter()
                explored = explorer.sample()
                first_group = 1 + max((t.group_id for t in own.trajectories), default=-1)
                replayed = relabelled_replay(explored.trajectories, first_group)
                explorer_metrics = explorer.learn(explored)  # on the env's process rewards
                explorer.record(explorer_metrics, time.perf_counter() - start)
                start = time.perf_counter() - sampling  # the main step's time counts its sampling
                own.trajectories = [outcome_only(t) for t in own.trajectories] + replayed
                own.metrics.update(
                    {
                        "rspo/replayed": len(replayed) / max(len(own.trajectories), 1),
                        "rspo/explorer_accuracy": explorer_metrics.get("accuracy", 0.0),
                    }
                )
                metrics = main.learn(own)
                main.record(metrics, time.perf_counter() - start)
                bar.update(main.state["step"], metrics)
        if stop_requested():
            self.stop()
        summaries = [
            member.finalize() if member.state.get("final_eval") is not None else member.finish()
            for member in self.members
        ]
        summary = {"steps": steps, **dict(zip(ROLES, summaries))}
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
