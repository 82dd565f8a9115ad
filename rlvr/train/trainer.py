"""The RL loop: sample groups, score them, compute advantages, update; eval, log and checkpoint.

It composes steps that live elsewhere and never names an algorithm: estimators, losses and
KL estimators come from the registries through the config.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from rlvr.algos.shaping import overlong_penalty, time_rewards
from rlvr.config import Config, dump_config
from rlvr.distributed.backends import build_rollout_source, build_update_group
from rlvr.train.canary import HackingMonitor
from rlvr.train.checkpoint import (
    Restored,
    checkpoint_step,
    complete_checkpoints,
    load_resumable,
    remove_incomplete,
    save_checkpoint,
)
from rlvr.train.components import build_components
from rlvr.train.display import Display
from rlvr.train.evaluate import compared, difficulty, evaluate, held_out
from rlvr.train.faults import (
    RewardErrors,
    TrainingInterrupted,
    explained_stops,
    free_space,
    resume_hint,
    stop_at_step_end,
)
from rlvr.train.hooks import Run, Step
from rlvr.train.loggers import Trackers, check_installed
from rlvr.train.metrics import batch_metrics, sample_records, staleness_metrics
from rlvr.train.monitors import Monitors
from rlvr.train.policy import load_policy, policy_path, save_policy, seed_everything
from rlvr.train.prepare import UpdatePreparer
from rlvr.train.profile import ModelShape, compute_setting, peak_flops, step_profile, timed
from rlvr.train.rundir import RunDir, RunDirError
from rlvr.train.sampling import GroupSampler, Sampled
from rlvr.train.update import UpdateInputs, UpdateResult
from rlvr.types import Batch, Trajectory


class Trainer:
    """Holds the state of one run; `run()` is the loop."""

    def __init__(
        self,
        cfg: Config,
        resume: Path | None = None,
        resume_step: int | None = None,
        policy: tuple | None = None,
    ):
        """`resume` continues that run dir from its newest complete checkpoint, or from the one of
        `resume_step` (a runner resumes its trainers at the step all of them saved). `policy` =
        (model, tokenizer) already loaded: one of a runner's roles may train its own adapter on
        another's model."""
        self.cfg = cfg
        self.components = build_components(cfg)  # every config mistake surfaces here, before work
        check_installed(cfg)  # a tracker in log.report_to that is missing, before any work
        self.display = Display(cfg.log.quiet)
        self.run_dir = RunDir.open(cfg, resume)
        seed_everything(cfg.train.seed)
        self.model, self.tokenizer = policy or load_policy(cfg, self.components, self.display)
        self.shape = ModelShape.of(self.model)
        # the matmul peak where and in the dtype the model computes, measured once per process
        # and setting, here at start-up rather than inside a step
        self.peak = peak_flops(*compute_setting(self.model, cfg.train.autocast))
        self.checkpoint_seconds = 0.0  # the last save's, logged with the step after it
        self.preparer = UpdatePreparer.for_run(
            cfg, self.model, self.tokenizer.pad_token_id, self.components
        )
        p = self.preparer  # what the step's preparation reads, and the checkpoint keeps
        self.reference, self.critic = p.reference, p.critic
        self.kl_coef, self.reward_baseline = p.kl_coef, p.reward_baseline
        self.canary = HackingMonitor()
        self.monitors = Monitors(cfg.train.monitors)
        self.update_rng = torch.Generator().manual_seed(cfg.train.seed)
        self.eval_problems = held_out(self.components.task, cfg.task.eval_size, self.display)
        self.reward_errors = RewardErrors(self.run_dir.reward_errors, self.display)
        self.state = dict(step=0, cursor=0, bad_steps=0, base_eval=None, elapsed=0.0)
        self.state["hash"] = cfg.hash()
        restored = None
        if resume and complete_checkpoints(self.run_dir.checkpoints):
            restored = self._resume(resume_step)
        elif note := self.run_dir.start(cfg, resumed=resume is not None):
            self.display.message(note)
        self.connect(policy_path(cfg, self.components.task), restored)

    def connect(self, model_path: str, restored: Restored | None) -> None:
        """The rollout source, the update group, the methods and the trackers, wired to the
        policy as loaded or restored."""
        cfg, in_flight = self.cfg, self.state.pop("in_flight", {})  # sampled ahead of a checkpoint
        self.source = build_rollout_source(
            cfg, self.model, self.tokenizer, self.components, model_path
        )
        self.sampler = GroupSampler(cfg, self.components, self.source, self.reward_errors)
        try:
            self.source.restore(in_flight)
            # a resumed or adapted policy differs from the files
            self.source.sync(self.model, self.state["step"])
            self.updater = build_update_group(
                cfg, self.tokenizer, model_path, self.source, self.model
            )
            self.updater.load(self.model, restored)
            self.methods = self.components.methods
            self.methods.setup(Run(
                cfg, self.model, self.tokenizer, self.components, self.source, self.updater,
                self.critic, self.display.message,
            ))  # fmt: skip
            self.methods.load_state_dict(self.state.pop("methods", {}))
        except BaseException:
            self.source.close()
            raise
        for line in self.source.describe() + self.updater.describe():
            self.display.message(line)
        try:
            self.trackers = Trackers(cfg, self.run_dir.path)
        except BaseException:
            self.updater.close()
            self.source.close()
            raise

    def _resume(self, at_step: int | None) -> Restored:
        """Restore the policy, the RNGs and the trainer state; what the update group takes
        (optimizer and scheduler state) is returned for it."""
        removed = remove_incomplete(self.run_dir.checkpoints)  # the complete ones are intact
        restored = load_resumable(self.run_dir.checkpoints, at_step, self.model, self.cfg)
        state = restored.state
        self.update_rng.set_state(state.pop("update_rng"))
        for key, part in self.stateful().items():
            part.load_state_dict(state.pop(key))
        self.kl_coef.value = state.get("kl_coef", self.kl_coef.value)
        self.state = state
        final_eval = state.get("final_eval")
        if final_eval is not None and state["step"] == self.cfg.train.steps:
            return restored  # finished: run() completes what a kill cut short, nothing else
        self.run_dir.config_file.write_text(dump_config(self.cfg))  # train.steps may have changed
        self.run_dir.truncate_metrics(state["step"])
        if final_eval is not None:  # train.steps grew: the last step becomes an ordinary one
            del self.state["final_eval"]
            keep_eval = self.due(self.cfg.train.eval_every)
            self.run_dir.reopen_final_step(state["step"], keep_eval)
            if keep_eval:
                self.canary.observe_eval(final_eval["eval/accuracy"])
        cleaned = f" (removed {len(removed)} checkpoint(s) cut short)" if removed else ""
        self.display.message(f"resumed {self.run_dir.path} at step {state['step']}{cleaned}")
        return restored

    def stateful(self) -> dict:
        """The parts a checkpoint keeps the state_dict of, by key, beside the trainer's state
        (the methods' are restored after their setup; the reference is the starting model)."""
        parts = {
            "canary": self.canary,
            "monitors": self.monitors,
            "reward_baseline": self.reward_baseline,
        }
        if self.critic is not None:
            parts["critic"] = self.critic
        if hasattr(self.components.task, "state_dict"):  # e.g. tree_search's curriculum
            parts["task"] = self.components.task
        return parts

    def save(self) -> None:
        state = dict(
            self.state,
            update_rng=self.update_rng.get_state(),
            in_flight=self.source.in_flight(),  # batches sampled ahead (rollout.max_staleness)
            methods=self.methods.state_dict(),
            **{key: part.state_dict() for key, part in self.stateful().items()},
        )
        step, directory = self.state["step"], self.run_dir.checkpoints
        try:
            u = self.updater
            save_checkpoint(directory, step, self.model, u.optimizer, u.scheduler, state)
        except Exception as e:  # torch and safetensors report a full disk as their own errors
            raise RunDirError(
                f"could not write checkpoint step-{step:06d} to {directory} ({type(e).__name__}: "
                f"{e}; {free_space(directory)}); {resume_hint(self.run_dir.path)} once the disk "
                "has room or is writable again"
            ) from e

    def evaluate(self) -> dict[str, float]:
        start = time.perf_counter()
        metrics = evaluate(
            self.source.evaluator,
            self.eval_problems,
            self.cfg.train.eval_k,
            self.cfg.train.seed,
        )
        return dict(metrics, **{"time/eval": time.perf_counter() - start})

    def step(self) -> dict[str, float]:
        """One RL step: rollout -> rewards -> (old/ref logprobs) -> advantages -> policy update."""
        return self.learn(self.sample())

    def sample(self) -> Sampled:
        """This step's scored groups; a runner may rescore them before `learn`."""
        timings: dict[str, float] = {}
        start = time.perf_counter()
        trajectories, baselines, sampling = self.rollout(timings)
        if hasattr(self.components.task, "observe"):  # a task that adapts to training's outcomes
            sampling.update(self.components.task.observe(trajectories))
        self.methods.after_sample(Step(self.state["step"], trajectories, sampling, timings))
        timings["time/rollout"] = (
            time.perf_counter() - start - timings.get("time/baseline_rollout", 0)
        )
        return Sampled(trajectories, baselines, sampling, timings)

    def learn(self, sampled: Sampled) -> dict[str, float]:
        """Shape the rewards, compute advantages and update the policy on `sampled`."""
        timings = sampled.timings
        trajectories, baselines, sampling = sampled.trajectories, sampled.baselines, sampled.metrics
        prepare_start, timed_before = time.perf_counter(), sum(timings.values())
        if not trajectories:  # every sample hit an infrastructure error: nothing to learn from
            self.display.message(
                f"[yellow]step {self.state['step']}: every reward failed (infra_error); no update"
            )
            return {**sampling, **timings, "status/infra_error": 1.0, "skipped_updates": 0}
        step = Step(self.state["step"], trajectories, sampling, timings)
        shaped = self.shape_rewards(step)
        data, extra = self.preparer.prepare(step, baselines)
        self.methods.update_inputs(step, data)
        extra.update(sampling, **shaped)
        # less the phases timed inside it (logprob passes, a method's own), so phases add up
        nested = sum(timings.values()) - timed_before
        timings["time/advantages"] = time.perf_counter() - prepare_start - nested
        result = self.update(step, data, extra)
        return self.step_metrics(step, data, result, extra)

    def shape_rewards(self, step: Step) -> dict[str, float]:
        """The rewards as the learner sees them (a method's rescoring, reward timing, the overlong
        penalty, bonuses), packed into `step.batch`; and the shaping's metrics."""
        cfg, trajectories, pad_id = self.cfg, step.trajectories, self.tokenizer.pad_token_id
        self.methods.rescore(step)
        for trajectory in trajectories:
            trajectory.turn_rewards = time_rewards(trajectory.turn_rewards, cfg.algo.reward_timing)
        penalties = overlong_penalty(
            torch.tensor([t.num_generated for t in trajectories]), cfg.rollout.max_new_tokens,
            cfg.algo.overlong_window, cfg.algo.overlong_factor,
        )  # fmt: skip
        for trajectory, penalty in zip(trajectories, penalties.tolist()):
            trajectory.turn_rewards[-1] += penalty
        shaped = {"reward/overlong": float(penalties.mean())} if cfg.algo.overlong_window else {}
        step.batch = Batch.from_trajectories(trajectories, pad_id)
        bonus = self.methods.reward_bonus(step)
        if bonus is not None:
            for trajectory, value in zip(trajectories, bonus.tolist()):
                trajectory.turn_rewards[-1] += value
            # rebuilt so every reward view (token, turn, episode) holds the bonus
            step.batch = Batch.from_trajectories(trajectories, pad_id)
        if cfg.algo.mask_truncated:
            step.batch.loss_mask[[t.finish_reason == "length" for t in trajectories]] = 0.0
        return shaped

    def update(self, step: Step, data: UpdateInputs, extra: dict[str, float]) -> UpdateResult:
        """The policy update (after any critic warm-up), the weight sync, and the critic's fit
        (its metrics join `extra`)."""
        cfg, timings = self.cfg, step.timings
        with timed(timings, "time/update"):
            self.source.release_memory()
            if self.state["step"] >= cfg.algo.critic_warmup_steps:
                result = self.updater.update(
                    self.model, data, self.components.loss,
                    None if cfg.algo.kl_in_reward else self.components.kl, self.update_rng,
                )  # fmt: skip
            else:  # critic warm-up: the policy waits until the values mean something
                result = UpdateResult({}, skipped=0)
        with timed(timings, "time/weight_sync"):
            self.source.sync(self.model, self.state["step"] + 1)
        if self.critic is not None and step.values is None:  # a critic that judged stays as is
            with timed(timings, "time/critic"):
                extra.update(
                    self.critic.update(step.batch, data.returns, data.values, self.update_rng)
                )
        return result

    def step_metrics(
        self, step: Step, data: UpdateInputs, result: UpdateResult, extra: dict[str, float]
    ) -> dict[str, float]:
        """What the step logs: the batch's, the update's, throughput and FLOPs; some samples."""
        cfg, timings, trajectories, batch = self.cfg, step.timings, step.trajectories, step.batch
        metrics_start = time.perf_counter()
        self.state["bad_steps"] = self.state["bad_steps"] + 1 if result.skipped else 0
        metrics = dict(batch_metrics(trajectories), **result.metrics, **extra, **timings)
        metrics.update(staleness_metrics(trajectories, self.state["step"]))
        metrics.update(self.source.metrics())
        metrics.update(self.canary.observe_step(trajectories))
        if "kl" in metrics:
            self.state["kl_coef"] = self.kl_coef.update(metrics["kl"], len(batch))
            metrics["kl_coef"] = data.kl_coef
        metrics["skipped_updates"] = result.skipped
        metrics["lr"] = self.updater.scheduler.get_last_lr()[0]
        metrics.update(
            step_profile(self.shape, cfg, step, data, result, self.critic is not None, self.peak)
        )
        if cfg.log.samples_per_step:
            n = cfg.log.samples_per_step
            self.run_dir.log_samples(sample_records(
                self.state["step"] + 1, trajectories[:n], data.advantages[:n],
                batch.loss_mask[:n], batch.input_ids[:n], self.tokenizer.decode,
            ))  # fmt: skip
        metrics["time/metrics"] = time.perf_counter() - metrics_start
        return metrics

    def rollout(
        self, timings: dict[str, float]
    ) -> tuple[list[Trajectory], torch.Tensor | None, dict[str, float]]:
        return self.sampler.collect(self.state, timings)

    def problems(self, cursor: int, count: int) -> list:
        return self.sampler.problems(cursor, count)

    def run(self) -> dict:
        """Train to train.steps and finish. The first Ctrl-C stops after the current step with a
        checkpoint of it; any stop raises TrainingInterrupted naming what `--resume` continues."""
        try:
            with explained_stops(self.run_dir.path, lambda: self.state["step"]):
                if self.state.get("final_eval") is not None:  # resumed after its final eval
                    return self.finalize()
                with stop_at_step_end() as stop_requested:
                    return self.train(stop_requested)
        finally:
            self.close()

    def log(self, record: dict) -> None:
        """One record to metrics.jsonl and to every tracker in log.report_to."""
        self.run_dir.log(record)
        self.trackers.log(record)

    def close(self) -> None:
        try:
            self.trackers.close()
            self.updater.close()
        finally:
            self.source.close()

    def train(self, stop_requested: Callable[[], bool]) -> dict:
        self.begin()
        with self.display.bar("rl", self.cfg.train.steps, self.state["step"]) as bar:
            while self.state["step"] < self.cfg.train.steps:
                if stop_requested():
                    self.stop()
                step_start = time.perf_counter()
                metrics = self.step()
                self.record(metrics, time.perf_counter() - step_start)
                bar.update(self.state["step"], metrics)
        if stop_requested():
            self.stop()
        return self.finish()

    def begin(self) -> None:
        """Start the clock (from where a resumed run stopped) and score the base model once."""
        self.started = time.perf_counter() - self.state["elapsed"]
        if self.state["base_eval"] is None:
            self.state["base_eval"] = self.evaluate()
            self.canary.observe_eval(self.state["base_eval"]["eval/accuracy"])
            self.log({"step": 0, **self.state["base_eval"]})
            self.display.message(
                f"base model: eval accuracy {self.state['base_eval']['eval/accuracy']:.3f}"
            )
            warning = difficulty(self.state["base_eval"], self.cfg.train.eval_k)
            if warning:
                self.display.message(f"[yellow]{warning}")

    def record(self, metrics: dict[str, float], seconds: float) -> None:
        """Close a step that took `seconds`: count it, eval and checkpoint when due, log it."""
        cfg = self.cfg
        self.state["step"] += 1
        metrics["time/step"] = seconds
        if self.checkpoint_seconds:
            metrics["time/checkpoint"], self.checkpoint_seconds = self.checkpoint_seconds, 0
        if metrics["skipped_updates"]:
            self.on_bad_step()
        if self.due(cfg.train.eval_every):
            metrics.update(self.evaluate())
            self.canary.observe_eval(metrics["eval/accuracy"])
        for warning in self.canary.new_warnings(metrics):
            self.display.message(f"[yellow]step {self.state['step']}: {warning}")
        stop = self.monitors.act(
            metrics, self.state["step"], self.display.message, self.updater.scale_lr
        )
        self.state["elapsed"] = time.perf_counter() - self.started
        self.log({"step": self.state["step"], **metrics})
        if self.due(cfg.train.save_every):
            start = time.perf_counter()
            self.save()
            self.checkpoint_seconds = time.perf_counter() - start
        if stop is not None:
            self.save_if_new()
            raise TrainingInterrupted(
                f"{stop.message} after step {self.state['step']}; {resume_hint(self.run_dir.path)}"
            )

    def stop(self) -> None:
        """Ctrl-C, between steps: the state is exactly that after a whole step, so a checkpoint
        of it resumes bit for bit."""
        self.save_if_new()
        raise TrainingInterrupted(
            f"stopped after step {self.state['step']}; {resume_hint(self.run_dir.path)}"
        )

    def save_if_new(self) -> None:
        done = complete_checkpoints(self.run_dir.checkpoints)
        if not done or checkpoint_step(done[-1]) != self.state["step"]:
            self.save()

    def use_task(self, task) -> None:
        """Train and evaluate on `task`'s problems (a runner's trainers may share one)."""
        self.components.task = task
        self.eval_problems = task.eval_problems()

    def due(self, interval: int) -> bool:
        """Every `interval` steps (0 = never) before the last, which finish() handles."""
        step = self.state["step"]
        return bool(interval) and step % interval == 0 and step < self.cfg.train.steps

    def on_bad_step(self) -> None:
        step, bad = self.state["step"], self.state["bad_steps"]
        self.display.message(f"[yellow]step {step}: non-finite loss or gradient, update skipped")
        if bad >= self.cfg.train.max_bad_steps:
            raise RuntimeError(
                f"aborting: {bad} consecutive steps had a non-finite loss or gradient; the last "
                f"good checkpoint is in {self.run_dir.checkpoints}. Lower train.lr or check the "
                "reward for extreme values."
            )

    def finish(self) -> dict:
        final_eval = self.evaluate()
        self.log({"step": self.state["step"], **final_eval})
        self.state["final_eval"] = final_eval  # marks the checkpoint as that of a finished run
        self.state["elapsed"] = time.perf_counter() - self.started
        self.save()
        return self.finalize()

    def finalize(self) -> dict:
        """final/, summary.json and the report, unless a finished run was resumed: then nothing."""
        if self.run_dir.finished(self.state["step"]):
            self.display.message(self.run_dir.finished_note())
            return self.run_dir.read_summary()
        save_policy(self.model, self.tokenizer, self.run_dir.final)
        summary = self.run_dir.write_summary(self.state, self.cfg.hash(), self.cfg.log.report)
        rows = compared(self.state["base_eval"], self.state["final_eval"])
        self.display.summary(f"{self.run_dir.path}  ({summary['wall_seconds']:.0f} s)", rows)
        return summary
