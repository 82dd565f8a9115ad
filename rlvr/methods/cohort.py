"""Co-RL: several policies trained in lockstep on the same problems, each rewarded for agreeing
with the majority answer of its neighbour in a ring (or its own, TTRL), so no label is read."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from rlvr.config import Config, ConfigError, build_config, set_dotted
from rlvr.models.lora import add_adapter
from rlvr.rewards.peer import ANSWER_KEYS, agreement_rewards, answer_reader, majority_vote
from rlvr.tasks.paraphrase import Paraphrased
from rlvr.train.components import build_components
from rlvr.train.display import Display
from rlvr.train.group import TrainerGroup
from rlvr.train.policy import policy_path
from rlvr.train.trainer import Trainer
from rlvr.types import Trajectory

# Keys every member must share: they sample the same problems in the same steps, and save and
# evaluate together so that the cohort resumes at a step all of them saved.
SHARED_KEYS = ("task.", "cohort.", "log.", "distributed.", "rollout.batch_size",
               "rollout.group_size", "rollout.max_staleness", "train.steps", "train.eval_every",
               "train.save_every")  # fmt: skip


def member_configs(cfg: Config, cohort_dir: Path) -> list[Config]:
    """One config per cohort.members entry: the run's config with the entry's dotted overrides,
    logging to `cohort_dir`/member-<i>."""
    base = cfg.model_dump(mode="json")
    del base["cohort"]
    configs = []
    for index, overrides in enumerate(cfg.cohort.members):
        data = copy.deepcopy(base)
        for key, value in overrides.items():
            if "." not in key:
                raise ConfigError(
                    f"cohort.members[{index}]: '{key}' is not a dotted key; fix: write "
                    f'section.key, e.g. {{"train.seed" = {index}}}'
                )
            if key.startswith(SHARED_KEYS) and key != "task.paraphrase":
                raise ConfigError(
                    f"cohort.members[{index}]: '{key}' must be the same for every member (they "
                    "answer the same problems in lockstep, and save and evaluate together); fix: "
                    "set it for the whole run, outside cohort.members"
                )
            set_dotted(data, key, value)
        data["log"].update(run_dir=str(cohort_dir), name=f"member-{index}")
        try:
            configs.append(build_config(data))
        except ConfigError as e:
            raise ConfigError(f"cohort.members[{index}]: {e}") from None
    return configs


def check_cohort(cfg: Config) -> None:
    """Refuse, before any work, a cohort whose rewards could not be read or would leak labels."""
    c, a = cfg.cohort, cfg.algo
    if c.reward == "peer" and len(c.members) < 2:
        raise ConfigError(
            f"cohort.reward = 'peer' rewards each member by its ring neighbour, but cohort.members "
            f'has {len(c.members)}; fix: add a member (e.g. {{"train.seed" = 1}}), or '
            "cohort.reward=self"
        )
    if cfg.distributed.backend != "local":
        raise ConfigError(
            "a cohort trains its members in one process; fix: distributed.backend=local"
        )
    if c.reward == "label":
        return
    components = build_components(cfg)
    task = components.task
    if task.verifier not in ANSWER_KEYS:
        what = "scores itself as an environment" if task.verifier is None else (
            f"is checked by '{task.verifier}'"
        )  # fmt: skip
        raise ConfigError(
            f"cohort.reward = '{c.reward}' votes on answers, but task '{cfg.task.name}' {what}, "
            f"whose answers a vote cannot read (it reads those of {', '.join(ANSWER_KEYS)}); "
            "fix: a single-turn task with one of those verifiers, or cohort.reward=label"
        )
    label_readers = {
        "task.rewards": bool(cfg.task.rewards),
        "algo.dynamic_sampling": a.dynamic_sampling,
        f"algo.advantage = '{a.advantage}'": "baseline_rewards" in components.requires,
        **{f"methods.{n}": m.reads_labels for n, m in components.methods.chosen.items()},
    }
    for key, used in label_readers.items():
        if used:
            raise ConfigError(
                f"cohort.reward = '{c.reward}' trains without labels, but {key} reads the "
                "verifier's scores; fix: drop it, or cohort.reward=label"
            )


def votes(trajectories: list[Trajectory], answers: list[str | None]) -> dict[int, tuple]:
    """Each group's majority answer: {group id: (problem id, answer or None, whether the
    answer is right by the verifier)}."""
    groups: dict[int, list[int]] = {}
    for index, trajectory in enumerate(trajectories):
        groups.setdefault(trajectory.group_id, []).append(index)
    result = {}
    for group, members in groups.items():
        label = majority_vote([answers[i] for i in members])
        right = any(answers[i] == label and trajectories[i].correct for i in members)
        result[group] = (trajectories[members[0]].problem.id, label, label is not None and right)
    return result


def kappa(own: list[str], peer: list[str]) -> float | None:
    """Cohen's kappa between two members' majority answers; None where it is undefined (both
    always gave the one same answer)."""
    if not own or set(own) | set(peer) == set(own[:1]):
        return None
    # imported on first use: sklearn takes seconds to import, and every run imports this module
    # to ask whether it trains a cohort
    from sklearn.metrics import cohen_kappa_score

    return float(cohen_kappa_score(own, peer))


def rescore(
    trajectories: list[list[Trajectory]], answers: list[list[str | None]], mode: str
) -> list[dict[str, float]]:
    """Replace each member's rewards (in place) by agreement with its peer's majority answer per
    group: the member before it in the ring ('peer') or itself ('self'); 'label' keeps the
    verifier's. Returns each member's cohort metrics."""
    majorities = [votes(t, a) for t, a in zip(trajectories, answers)]
    metrics = []
    for index, (samples, replies) in enumerate(zip(trajectories, answers)):
        own, peer = majorities[index], majorities[index if mode == "self" else index - 1]
        shared = sorted(set(own) & set(peer))
        for group in shared:
            if own[group][0] != peer[group][0]:
                raise RuntimeError(
                    f"cohort: member {index} and its peer answered different problems in one "
                    f"group ({own[group][0]} vs {peer[group][0]}); members must share the task"
                )
        labels = [peer.get(t.group_id, (None, None))[1] for t in samples]
        agree = [agreement_rewards([a], label)[0] for a, label in zip(replies, labels)]
        if mode != "label":
            for trajectory, reward in zip(samples, agree):
                trajectory.turn_rewards = [0.0] * (len(trajectory.turn_rewards) - 1) + [reward]
        labelled = [g for g in peer if peer[g][1] is not None]
        member = {
            "cohort/agreement": sum(agree) / max(len(agree), 1),
            "cohort/labelled": len(labelled) / max(len(peer), 1),
            "cohort/label_accuracy": sum(peer[g][2] for g in labelled) / max(len(labelled), 1),
            "cohort/majority_accuracy": sum(v[2] for v in own.values()) / max(len(own), 1),
        }
        both = [g for g in shared if own[g][1] is not None and peer[g][1] is not None]
        value = kappa([own[g][1] for g in both], [peer[g][1] for g in both])
        if value is not None and mode != "self":
            member["cohort/kappa"] = value
        metrics.append(member)
    return metrics


def lora_base(cfg: Config) -> tuple | None:
    """Where a LoRA member's frozen base comes from (members with the same one share it, each
    training its own adapter); None for a member that trains all its weights."""
    m = cfg.model
    if m.lora.r <= 0:
        return None
    return policy_path(cfg, build_components(cfg).task), m.dtype, m.device, m.trust_remote_code


class Cohort(TrainerGroup):
    """Co-RL (`cohort.members`): the members' Trainers stepped together on the same problems,
    each rewarded for agreeing with a neighbour's majority answer."""

    @classmethod
    def chosen(cls, cfg: Config) -> bool:
        """A config that lists cohort members trains them as a cohort."""
        return bool(cfg.cohort.members)

    def __init__(self, cfg: Config, resume: Path | None = None):
        self.cfg = cfg
        self.name_dir(cfg, "cohort", resume)
        configs = member_configs(cfg, self.path)
        check_cohort(cfg)
        step = self.open_dir(cfg, "cohort", resume, [f"member-{i}" for i in range(len(configs))])
        self.display = Display(cfg.log.quiet)
        self.members: list[Trainer] = []
        # each member's LoRA adapter on member 0's model, or None where it holds its own model
        self.adapters: list[str | None] = []
        try:
            first = lora_base(configs[0])
            for index, member_cfg in enumerate(configs):
                self.display.message(f"cohort member {index}")
                member_dir = self.path / f"member-{index}" if resume else None
                policy, adapter = None, None
                if index == 0:
                    adapter = "default" if first else None
                elif first is not None and lora_base(member_cfg) == first:
                    model = self.members[0].model
                    policy, adapter = (model, self.members[0].tokenizer), f"member-{index}"
                    add_adapter(model, adapter, member_cfg.model.lora)
                self.adapters.append(adapter)
                with self.acting(index):
                    self.members.append(
                        Trainer(member_cfg, resume=member_dir, resume_step=step, policy=policy)
                    )
        except BaseException:
            self.close()
            raise
        # one task draws every member's problems; a member with task.paraphrase reads them reworded
        task = self.members[0].components.task
        if isinstance(task, Paraphrased):
            task = task.task
        for member, member_cfg in zip(self.members, configs):
            member.use_task(
                Paraphrased(task, cfg.task.name) if member_cfg.task.paraphrase else task
            )
        # under cohort.reward 'label' any verifier goes; its answers are then only counted
        self.answer = answer_reader(
            self.members[0].components.task.verifier, cfg.task.reward_params
        )

    def train(self, stop_requested) -> dict:
        members, steps = self.members, self.cfg.train.steps
        for index, member in enumerate(members):
            if member.state.get("final_eval") is None:
                with self.acting(index):
                    member.begin()
        with self.display.bar("cohort", steps, members[0].state["step"]) as bar:
            while members[0].state["step"] < steps:
                if stop_requested():
                    self.stop()
                sampled, seconds = [], []
                for index, member in enumerate(members):
                    start = time.perf_counter()
                    with self.acting(index):
                        sampled.append(member.sample())
                    seconds.append(time.perf_counter() - start)
                answers = [[self.answer(t.response_text) for t in s.trajectories] for s in sampled]
                trajectories = [s.trajectories for s in sampled]
                for sample, extra in zip(
                    sampled, rescore(trajectories, answers, self.cfg.cohort.reward)
                ):
                    sample.metrics.update(extra)
                logged = []
                for index, (member, sample, sampling) in enumerate(zip(members, sampled, seconds)):
                    start = time.perf_counter()
                    with self.acting(index):
                        metrics = member.learn(sample)
                        member.record(metrics, sampling + time.perf_counter() - start)
                    logged.append(metrics)
                shown = {
                    k: sum(m[k] for m in logged) / len(logged)
                    for k in set.intersection(*map(set, logged))
                }
                bar.update(members[0].state["step"], shown)  # the members' means
        if stop_requested():
            self.stop()
        summaries = []
        for index, member in enumerate(members):
            with self.acting(index):
                done = member.state.get("final_eval") is not None
                summaries.append(member.finalize() if done else member.finish())
        summary = {"steps": steps, "reward": self.cfg.cohort.reward, "members": summaries}
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
