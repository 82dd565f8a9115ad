"""MADA-RL: a generator and a critic, two LoRA adapters on one frozen base, trained together.
Round 1 the generator answers; each later round the critic answers again, shown earlier answers."""

from __future__ import annotations

import copy
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from rlvr.config import Config, ConfigError, build_config, set_dotted
from rlvr.models.lora import add_adapter, is_lora, use_adapter
from rlvr.rewards.peer import ANSWER_KEYS, answer_reader
from rlvr.rollout.critique import critic_problem, shown_text
from rlvr.train.components import build_components
from rlvr.train.display import Display
from rlvr.train.group import TrainerGroup
from rlvr.train.hooks import Method
from rlvr.train.sampling import Sampled
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Trajectory

GENERATOR, CRITIC = "default", "critic"  # peft adapter names; apply_lora's first is "default"
DEBATE_STREAM = 4  # the critic's sampling seeds (training 0, eval 1, River 2, RGPO 3)
# What both roles share: the base model, the problems and the schedule.
SHARED_KEYS = ("task.", "debate.", "cohort.", "log.", "distributed.", "rollout.batch_size",
               "rollout.group_size", "rollout.engine", "rollout.max_staleness", "train.steps",
               "train.eval_every", "train.save_every", "train.seed")  # fmt: skip


def role_configs(cfg: Config, debate_dir: Path) -> tuple[Config, Config]:
    """(generator, critic): the run's config, and it with debate.critic's dotted overrides; each
    logs to `debate_dir`/<role>."""
    base = cfg.model_dump(mode="json")
    configs = []
    for role, overrides in (("generator", {}), ("critic", cfg.debate.critic)):
        data = copy.deepcopy(base)
        for key, value in overrides.items():
            shared = key.startswith(SHARED_KEYS) or (
                key.startswith("model.") and not key.startswith("model.lora.")
            )
            if "." not in key or shared:
                raise ConfigError(
                    f"debate.critic: '{key}' cannot differ for the critic (both roles share the "
                    "base model, the problems and the schedule); fix: a dotted key of algo., "
                    "train. (lr, weight decay), rollout. (sampling) or model.lora."
                )
            set_dotted(data, key, value)
        data["log"].update(run_dir=str(debate_dir), name=role)
        try:
            configs.append(build_config(data))
        except ConfigError as e:
            raise ConfigError(f"debate ({role}): {e}") from None
    return configs[0], configs[1]


def check_debate(cfg: Config, generator: Config, critic: Config) -> None:
    """Refuse, before any work, a debate that could not run as specified."""
    d = cfg.debate
    fixes = {
        "model.lora.r > 0 (the roles are LoRA adapters on one frozen base)": cfg.model.lora.r > 0
        and critic.model.lora.r > 0,
        "rollout.engine = 'hf' (the roles switch adapters on one in-process model)": (
            cfg.rollout.engine == "hf"
        ),
        "distributed.backend = 'local'": cfg.distributed.backend == "local",
        "no cohort.members (a debate is its own pair of policies)": not cfg.cohort.members,
        f"debate.shown <= rollout.group_size ({cfg.rollout.group_size})": (
            d.shown <= cfg.rollout.group_size
        ),
    }
    generator_advantage = build_components(generator).advantage
    fixes["a generator whose advantage needs no critic's baseline"] = not getattr(
        generator_advantage, "critic_only", False
    )
    c = critic
    fixes.update(
        {  # the critic samples through the debate, not Trainer.rollout, which runs these
            "a critic without algo.dynamic_sampling": not c.algo.dynamic_sampling,
            "a critic without methods that act after sampling": not any(
                type(m).after_sample is not Method.after_sample
                for m in build_components(c).methods.chosen.values()
            ),
            "a critic without rollout.tree_width": not c.rollout.tree_width,
        }
    )
    for need, met in fixes.items():
        if not met:
            raise ConfigError(f"debate.rounds = {d.rounds} needs {need}; fix: set it")
    task = build_components(cfg).task
    if hasattr(task, "make_env"):
        raise ConfigError(
            f"debate: task '{cfg.task.name}' is multi-turn; the critic revises single answers. "
            "fix: a single-turn task"
        )
    if d.show == "answers" and task.verifier not in ANSWER_KEYS:
        raise ConfigError(
            f"debate.show = 'answers' reads each answer as the verifier does, but task "
            f"'{cfg.task.name}' is checked by '{task.verifier}'; fix: debate.show = 'replies'"
        )


def groups(trajectories: list[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories by group, in the order the groups first appear."""
    by_id: dict[int, list[Trajectory]] = {}
    for t in trajectories:
        by_id.setdefault(t.group_id, []).append(t)
    return list(by_id.values())


def correction_metrics(
    shown_accuracy: list[float], critic_correct: list[list[bool]], prefix: str
) -> dict[str, float]:
    """How the critic's answers compare with the generator answers it was shown, per problem:
    `fixed` = its accuracy where most shown answers were wrong, `kept` = where most were right."""
    wrong = [c for a, c in zip(shown_accuracy, critic_correct) if a < 0.5]
    right = [c for a, c in zip(shown_accuracy, critic_correct) if a > 0.5]
    flat = [x for c in critic_correct for x in c]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return {
        f"{prefix}generator_accuracy": mean(shown_accuracy),
        f"{prefix}critic_accuracy": mean(flat),
        f"{prefix}fixed": mean([x for c in wrong for x in c]),
        f"{prefix}kept": mean([x for c in right for x in c]),
        f"{prefix}wrong_consensus": len(wrong) / max(len(shown_accuracy), 1),
    }


class Debate(TrainerGroup):
    """MADA-RL (`debate.rounds`): the Trainers of a generator and of a critic that answers again,
    shown the earlier answers, two adapters on one model (members [generator, critic])."""

    @classmethod
    def chosen(cls, cfg: Config) -> bool:
        """A config with debate rounds (2 or more: the config refuses 1) trains a debate."""
        return bool(cfg.debate.rounds)

    def __init__(self, cfg: Config, resume: Path | None = None):
        self.cfg = cfg
        self.name_dir(cfg, "debate", resume)
        generator_cfg, critic_cfg = role_configs(cfg, self.path)
        check_debate(cfg, generator_cfg, critic_cfg)
        self.display = Display(cfg.log.quiet)
        dirs = {role: self.path / role for role in ("generator", "critic")}
        step = self.open_dir(cfg, "debate", resume, list(dirs))
        self.log_path = self.path / "debate.jsonl"
        self.generator = Trainer(
            generator_cfg, resume=dirs["generator"] if resume else None, resume_step=step
        )
        self.model = self.generator.model
        try:
            if not is_lora(self.model):  # check_debate saw r > 0; a hub model may still refuse
                raise ConfigError("debate: the generator is not a LoRA model")
            add_adapter(self.model, CRITIC, critic_cfg.model.lora)
            with use_adapter(self.model, CRITIC):
                self.critic = Trainer(
                    critic_cfg, resume=dirs["critic"] if resume else None, resume_step=step,
                    policy=(self.model, self.generator.tokenizer),
                )  # fmt: skip
        except BaseException:
            self.generator.close()
            raise
        self.members, self.adapters = [self.generator, self.critic], [GENERATOR, CRITIC]
        self.answer = answer_reader(self.generator.components.task.verifier, cfg.task.reward_params)

    def shown_text(self, trajectory: Trajectory) -> str:
        return shown_text(trajectory.response_text, self.cfg.debate.show, self.answer)

    def critic_rounds(
        self, problems: list[Problem], first: list[list[Trajectory]], seed: tuple, greedy: bool
    ) -> list[list[Trajectory]]:
        """The critic's rounds 2..debate.rounds on `problems`, after the generator's groups
        `first`: each round shown `debate.shown` answers of every earlier round. Returns the
        critic's trajectories per round, group ids numbered on across rounds."""
        d, trainer = self.cfg.debate, self.critic
        # the in-process runners themselves: a debate is local (check_debate)
        source = trainer.source.evaluator if greedy else trainer.source.runner
        params = replace(source.params, temperature=0.0) if greedy else None
        group_size = 1 if greedy else self.cfg.rollout.group_size
        shown = [[[self.shown_text(t) for t in group[: d.shown]]] for group in first]
        rounds = []
        for index in range(d.rounds - 1):
            asked = [critic_problem(p, s) for p, s in zip(problems, shown)]
            with use_adapter(self.model, CRITIC):
                samples = source.collect(
                    asked, group_size, (*seed, index), params, first_group=index * len(problems)
                )
            if not greedy:
                for t in samples:
                    t.stamp(trainer.source.version)
            rounds.append(samples)
            for answers, group in zip(shown, groups(samples)):
                answers.append([self.shown_text(t) for t in group[: d.shown]])
        return rounds

    def sample_critic(self, generated: Sampled) -> tuple[Sampled, dict[str, float]]:
        """The critic's scored rounds on this step's problems, with each sample's counterfactual
        baseline (the mean reward of the generator answers it was shown)."""
        d, critic = self.cfg.debate, self.critic
        start = time.perf_counter()
        first = groups(generated.trajectories)
        problems = [group[0].problem for group in first]
        seed = (self.cfg.train.seed, DEBATE_STREAM, critic.state["step"])
        rounds = self.critic_rounds(problems, first, seed, greedy=False)
        trajectories = [t for samples in rounds for t in samples]
        critic.reward_errors.record(critic.state["step"] + 1, trajectories)
        shown_reward = [sum(t.reward for t in g[: d.shown]) / len(g[: d.shown]) for g in first]
        shown_accuracy = [sum(t.correct for t in g[: d.shown]) / len(g[: d.shown]) for g in first]
        baselines = torch.tensor([shown_reward[t.group_id % len(first)] for t in trajectories])
        last = groups(rounds[-1])
        metrics = correction_metrics(
            shown_accuracy, [[t.correct for t in g] for g in last], "debate/"
        )
        timings = {
            "time/generate": critic.source.runner.timings.get("generate", 0.0),
            "time/rollout": time.perf_counter() - start,
        }
        return Sampled(trajectories, baselines, {}, timings), metrics

    def evaluate(self) -> dict[str, float]:
        """The debate on the held-out problems: `shown` generator samples (at the run's
        temperature) and the critic's greedy answer in each later round."""
        d, problems = self.cfg.debate, self.generator.eval_problems
        seed = (self.cfg.train.seed, DEBATE_STREAM + 1, 0)  # every eval the same draws
        with use_adapter(self.model, GENERATOR):
            first = groups(self.generator.source.evaluator.collect(problems, d.shown, seed))
        rounds = self.critic_rounds(problems, first, seed, greedy=True)
        shown_accuracy = [sum(t.correct for t in g) / len(g) for g in first]
        last = [[t.correct] for t in rounds[-1]]
        return correction_metrics(shown_accuracy, last, "debate/eval_")

    def log(self, record: dict) -> None:
        with self.log_path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def train(self, stop_requested) -> dict:
        generator, critic, steps = self.generator, self.critic, self.cfg.train.steps
        roles = ((generator, GENERATOR), (critic, CRITIC))
        if generator.state.get("final_eval") is None:
            for trainer, adapter in roles:
                with use_adapter(self.model, adapter):
                    trainer.begin()
            if generator.state["step"] == 0:
                self.log({"step": 0, **self.evaluate()})
        with self.display.bar("debate", steps, generator.state["step"]) as bar:
            while generator.state["step"] < steps:
                if stop_requested():
                    self.stop()
                start = time.perf_counter()
                with use_adapter(self.model, GENERATOR):
                    generated = generator.sample()
                sampling = time.perf_counter() - start
                revised, debate_metrics = self.sample_critic(generated)
                shown = {}
                for (trainer, adapter), sampled, seconds in (
                    (roles[0], generated, sampling),
                    (roles[1], revised, revised.timings["time/rollout"]),
                ):
                    start = time.perf_counter()
                    with use_adapter(self.model, adapter):
                        metrics = trainer.learn(sampled)
                        if trainer is critic:
                            metrics.update(debate_metrics)
                        trainer.record(metrics, seconds + time.perf_counter() - start)
                    shown[adapter] = metrics
                record = {"step": generator.state["step"], **debate_metrics}
                if generator.due(self.cfg.train.eval_every):
                    record.update(self.evaluate())
                self.log(record)
                # the generator's reward and accuracy, and how the critic did beside them
                bar.update(generator.state["step"], {**shown[GENERATOR], **debate_metrics})
        if stop_requested():
            self.stop()
        summaries = {}
        for (trainer, adapter), role in zip(roles, ("generator", "critic")):
            with use_adapter(self.model, adapter):
                done = trainer.state.get("final_eval") is not None
                summaries[role] = trainer.finalize() if done else trainer.finish()
        final = self.evaluate()
        self.log({"step": steps, **final})
        base = next(json.loads(line) for line in self.log_path.open())
        summary = {"steps": steps, "base": base, "final": final, "roles": summaries}
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
