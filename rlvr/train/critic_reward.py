"""RFPO in the loop: after algo.rfpo_label_steps of ordinary PPO, the critic is calibrated against
the verifier on held-out rollouts, frozen, and its verdict on each reply becomes the reward."""

from __future__ import annotations

import random

import torch

from rlvr.algos.advantages import at_last_policy_token
from rlvr.algos.critic_reward import Calibration
from rlvr.config import AlgoConfig
from rlvr.types import Batch, Trajectory

CALIBRATION_STREAM = 5  # sampling seeds apart from training 0, eval 1, River 2, RGPO 3, debate 4
WEAK_AUC = 0.7  # below this the critic's verdicts carry too little signal to train on alone


def reply_shape(trajectories: list[Trajectory]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each reply's generated tokens [N] and whether the token budget cut it off [N]."""
    lengths = torch.tensor([t.num_generated for t in trajectories])
    return lengths, torch.tensor([t.finish_reason == "length" for t in trajectories])


class CriticJudge:
    """The frozen critic's verdicts, once calibrated; its calibration is the state it keeps."""

    def __init__(self, algo: AlgoConfig, seed: int):
        self.algo, self.seed = algo, seed
        self.calibration: Calibration | None = None

    def judging(self, step: int) -> bool:
        return step >= self.algo.rfpo_label_steps

    def calibrate(self, runner, task, critic, group_size: int, pad_id: int, step: int) -> dict:
        """Sample algo.rfpo_calibration_rollouts replies to randomly drawn training problems, on
        a seed stream of their own and never trained on, score them with the verifier, and fit
        the baselines and threshold to those labels."""
        rng = random.Random(f"rfpo:{self.seed}")
        count = -(-self.algo.rfpo_calibration_rollouts // group_size)
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
            "Fix: more algo.rfpo_label_steps, or algo.rfpo_label_share > 0 to keep some labels"
        )

    def judge(
        self,
        trajectories: list[Trajectory],
        values: torch.Tensor,
        loss_mask: torch.Tensor,
        step: int,
    ) -> dict[str, float]:
        """Make each reply's reward the verdict on its final value (values, loss_mask [B, T]),
        except a seeded algo.rfpo_label_share of them, which keep the verifier's."""
        verdicts = self.calibration.verdicts(
            at_last_policy_token(values, loss_mask), *reply_shape(trajectories)
        )
        labelled = 0
        for trajectory, verdict in zip(trajectories, verdicts.tolist()):
            draw = random.Random(f"rfpo:{self.seed}:{step}:{trajectory.sample_index}").random()
            if draw < self.algo.rfpo_label_share:
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
