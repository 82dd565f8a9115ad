"""RFPO (arXiv 2609.37119): PPO whose critic becomes the reward. After `label_steps` of ordinary
PPO the critic is calibrated against the verifier on held-out rollouts and frozen; a reply then
passes when its value clears the baseline of its length decile and class (finished or cut off)
by the calibrated threshold."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from pydantic import Field

from rlvr.algos.advantages import GaeParams, at_last_policy_token
from rlvr.config import ConfigError
from rlvr.train.hooks import Method, MethodParams, Run, Step
from rlvr.train.profile import timed
from rlvr.types import Batch, Trajectory


class Params(MethodParams):
    label_steps: int = Field(
        10,
        ge=1,
        description="Steps of ordinary PPO (verifier rewards, a critic fitted to them by gae with "
        "gamma = lam = 1, so V estimates the chance of success from each prefix); then the critic "
        "is calibrated, frozen, and its verdict 1[V(reply) - b(length decile, cut off or not) > "
        "tau] is the reward.",
    )
    label_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of replies (a seeded draw each) that keep the verifier's reward after "
        "the switch (the paper's p).",
    )
    calibration_rollouts: int = Field(
        512,
        gt=0,
        description="Held-out replies (sampled for this alone, never trained on) that calibrate "
        "the baselines and tau against the verifier at the switch.",
    )


DECILES = torch.arange(1, 10, dtype=torch.float64) / 10


def length_cells(
    lengths: torch.Tensor, truncated: torch.Tensor, edges: torch.Tensor
) -> torch.Tensor:
    """[N] cell of each reply: its length decile (from `edges`, the 9 inner decile bounds of the
    calibration set's lengths) times 2, plus 1 when it was cut off by the token budget."""
    decile = torch.bucketize(lengths.double(), edges.double(), right=True)
    return decile * 2 + truncated.long()


@dataclass
class Calibration:
    """What turns a value into a verdict: decile bounds, a baseline per cell, the threshold."""

    edges: list[float]  # 9 inner decile bounds of reply lengths
    baselines: list[float]  # 20 cells: mean value of the calibration replies in each
    tau: float
    agreement: float  # share of calibration replies whose verdict matched the verifier's
    # P(a right reply's margin > a wrong one's), ties half: how well the critic separates them
    # at any threshold (0.5: not at all, or a calibration set of one class)
    auc: float

    @classmethod
    def fit(
        cls,
        values: torch.Tensor,
        lengths: torch.Tensor,
        truncated: torch.Tensor,
        labels: torch.Tensor,
    ) -> Calibration:
        """Baselines and the threshold that best agree with the verifier's `labels` [N] (bool) on
        these replies' final values [N]; a cell without replies takes the overall mean."""
        values = values.double()
        edges = torch.quantile(lengths.double(), DECILES)
        cells = length_cells(lengths, truncated, edges)
        counts = torch.bincount(cells, minlength=20).double()
        sums = torch.bincount(cells, weights=values, minlength=20)
        baselines = torch.where(counts > 0, sums / counts.clamp(min=1), values.mean())
        margins = values - baselines[cells]
        # a threshold below every margin, one between each pair of neighbours, one above all
        ordered = margins.unique()
        between = (ordered[1:] + ordered[:-1]) / 2
        candidates = torch.cat([ordered[:1] - 1, between, ordered[-1:] + 1])
        agreement = ((margins[None] > candidates[:, None]) == labels.bool()[None]).double().mean(1)
        best = int(agreement.argmax())  # the first of equals: the lowest such threshold
        return cls(edges.tolist(), baselines.tolist(), float(candidates[best]),
                   float(agreement[best]), separation(margins, labels.bool()))  # fmt: skip

    def verdicts(
        self, values: torch.Tensor, lengths: torch.Tensor, truncated: torch.Tensor
    ) -> torch.Tensor:
        """[N] 1.0 where a reply's value clears its cell's baseline by more than tau, else 0.0."""
        cells = length_cells(lengths, truncated, torch.tensor(self.edges))
        margins = values.double() - torch.tensor(self.baselines, dtype=torch.float64)[cells]
        return (margins > self.tau).float()


def separation(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """The ROC AUC of `scores` [N] for boolean `labels` [N]: the chance that a positive outscores
    a negative, ties counted half; 0.5 when either class is empty."""
    positive, negative = scores[labels], scores[~labels]
    if not len(positive) or not len(negative):
        return 0.5
    wins = (positive[:, None] > negative[None]).double() + 0.5 * (
        positive[:, None] == negative[None]
    )
    return float(wins.mean())


CALIBRATION_STREAM = 5  # sampling seeds apart from training 0, eval 1, River 2, RGPO 3, debate 4
WEAK_AUC = 0.7  # below this the critic's verdicts carry too little signal to train on alone


def reply_shape(trajectories: list[Trajectory]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each reply's generated tokens [N] and whether the token budget cut it off [N]."""
    lengths = torch.tensor([t.num_generated for t in trajectories])
    return lengths, torch.tensor([t.finish_reason == "length" for t in trajectories])


class CriticJudge:
    """The frozen critic's verdicts, once calibrated; its calibration is the state it keeps."""

    def __init__(self, params: Params, seed: int):
        self.params, self.seed = params, seed
        self.calibration: Calibration | None = None

    def judging(self, step: int) -> bool:
        return step >= self.params.label_steps

    def calibrate(self, runner, task, critic, group_size: int, pad_id: int, step: int) -> dict:
        """Sample `calibration_rollouts` replies to randomly drawn training problems, on
        a seed stream of their own and never trained on, score them with the verifier, and fit
        the baselines and threshold to those labels."""
        rng = random.Random(f"rfpo:{self.seed}")
        count = -(-self.params.calibration_rollouts // group_size)
        problems = [task.train_problem(rng.randrange(10**9)) for _ in range(count)]
        rollouts = runner.collect(problems, group_size, (self.seed, CALIBRATION_STREAM, step))
        rollouts = [t for t in rollouts if t.status != "infra_error"]
        batch = Batch.from_trajectories(rollouts, pad_id)
        values = at_last_policy_token(critic.values(batch), batch.loss_mask)
        labels = torch.tensor([t.correct for t in rollouts])
        self.calibration = Calibration.fit(values, *reply_shape(rollouts), labels)
        return {
            "rfpo/calibration_agreement": self.calibration.agreement,
            "rfpo/calibration_auc": self.calibration.auc,
            "rfpo/calibration_accuracy": float(labels.float().mean()),
            "rfpo/tau": self.calibration.tau,
        }

    def weak_judge(self) -> str | None:
        """What to tell the user when the calibrated critic barely tells right from wrong."""
        c = self.calibration
        if c.auc >= WEAK_AUC:
            return None
        return (
            f"RFPO: the critic separates right from wrong held-out replies with AUC {c.auc:.2f} "
            f"(its best threshold agrees with the verifier on {c.agreement:.0%} of them), so "
            "its verdicts carry little signal and a policy trained on them alone will drift. "
            "Fix: more methods.rfpo.label_steps, or methods.rfpo.label_share > 0 to keep some labels"
        )

    def judge(
        self,
        trajectories: list[Trajectory],
        values: torch.Tensor,
        loss_mask: torch.Tensor,
        step: int,
    ) -> dict[str, float]:
        """Make each reply's reward the verdict on its final value (values, loss_mask [B, T]),
        except a seeded `label_share` of them, which keep the verifier's."""
        verdicts = self.calibration.verdicts(
            at_last_policy_token(values, loss_mask), *reply_shape(trajectories)
        )
        labelled = 0
        for trajectory, verdict in zip(trajectories, verdicts.tolist()):
            draw = random.Random(f"rfpo:{self.seed}:{step}:{trajectory.sample_index}").random()
            if draw < self.params.label_share:
                labelled += 1
                continue
            trajectory.turn_rewards = [0.0] * (len(trajectory.turn_rewards) - 1) + [verdict]
        correct = torch.tensor([t.correct for t in trajectories])
        return {
            "rfpo/agreement": float((verdicts.bool() == correct).float().mean()),
            "rfpo/pass_rate": float(verdicts.mean()),
            "rfpo/labelled_share": labelled / len(trajectories),
        }

    def state_dict(self) -> dict:
        return {"calibration": None if self.calibration is None else vars(self.calibration)}

    def load_state_dict(self, state: dict) -> None:
        saved = state["calibration"]
        self.calibration = None if saved is None else Calibration(**saved)


class RFPO(Method):
    """RFPO (arXiv 2609.37119): after `label_steps` of PPO, the calibrated, frozen critic's
    verdict on each reply is its reward."""

    Params = Params

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        a = cfg.algo
        # gae's settings were validated before any method is built (train/components.py)
        fixed = a.advantage == "gae" and GaeParams(**a.advantage_params).lam_mode == "fixed"
        if not fixed or a.gamma != 1 or a.lam != 1:
            raise ConfigError(
                "methods.rfpo turns the critic into the reward, which needs a critic of "
                "P(success | prefix): gae with no discount and no bootstrapping. Fix: "
                "algo.advantage=gae, algo.gamma=1, algo.lam=1 and "
                "algo.advantage_params.lam_mode=fixed (or drop methods.rfpo)"
            )

    def setup(self, run: Run) -> None:
        self.run = run
        self.judge = CriticJudge(self.params, run.cfg.train.seed)

    def rescore(self, step: Step) -> None:
        if not self.judge.judging(step.index):
            return
        run, pad_id = self.run, self.run.tokenizer.pad_token_id
        if self.judge.calibration is None:  # the first judged step calibrates the frozen critic
            with timed(step.timings, "time/calibration"):
                step.metrics.update(self.judge.calibrate(
                    run.source.evaluator, run.components.task, run.critic,
                    run.cfg.rollout.group_size, pad_id, step.index,
                ))  # fmt: skip
            warning = self.judge.weak_judge()
            if warning:
                run.say(f"[yellow]{warning}")
        with timed(step.timings, "time/values"):
            batch = Batch.from_trajectories(step.trajectories, pad_id)
            step.values = run.critic.values(batch)
        step.metrics.update(
            self.judge.judge(step.trajectories, step.values, batch.loss_mask, step.index)
        )

    def state_dict(self) -> dict:
        return self.judge.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.judge.load_state_dict(state)
