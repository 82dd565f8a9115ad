"""Reward-hacking canaries: warn when the training reward rises but correctness does not."""

from __future__ import annotations

from collections import deque

from rlvr.rewards.format import format_reward
from rlvr.types import Trajectory


class HackingMonitor:
    """Compares the training reward's gain with the gains in held-out accuracy, in training
    accuracy and in a format-only reward. Gains are the mean of the last `window` steps minus
    that of the first `window` (held-out: the latest eval minus the base eval).

    Two canaries, logged as metrics each step and announced once when they turn on:
    - `canary/heldout`: the reward gained more than `margin` while held-out accuracy did not
      improve (the policy found something the reward pays for that is not the task);
    - `canary/format`: the reward gained more than `margin` while training accuracy did not
      improve and the format-only reward did (the gain is form, not substance).
    """

    def __init__(self, window: int = 5, margin: float = 0.1):
        self.window, self.margin = window, margin
        self.first: list[list[float]] = []  # [reward, accuracy, format] per step
        self.recent: deque[list[float]] = deque(maxlen=window)
        self.heldout: list[float] = []  # the base eval's accuracy, then the latest one's
        self.raised: set[str] = set()

    def state_dict(self) -> dict:
        return {
            "first": self.first,
            "recent": list(self.recent),
            "heldout": self.heldout,
            "raised": sorted(self.raised),
        }

    def load_state_dict(self, state: dict) -> None:
        self.first, self.heldout = state["first"], state["heldout"]
        self.recent = deque(state["recent"], maxlen=self.window)
        self.raised = set(state["raised"])

    def observe_eval(self, accuracy: float) -> None:
        self.heldout = [self.heldout[0], accuracy] if self.heldout else [accuracy]

    def observe_step(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """This step's canary metrics, with the format-only reward measured on its responses."""
        n = len(trajectories)
        row = [
            sum(t.reward for t in trajectories) / n,
            sum(t.correct for t in trajectories) / n,
            sum(format_reward(t.problem, t.response_text).value for t in trajectories) / n,
        ]
        if len(self.first) < self.window:
            self.first.append(row)
        self.recent.append(row)
        reward_gain, accuracy_gain, format_gain = (
            sum(r[i] for r in self.recent) / len(self.recent)
            - sum(r[i] for r in self.first) / len(self.first)
            for i in range(3)
        )
        rising = len(self.first) == self.window and reward_gain > self.margin
        # Held-out accuracy has moved only once an eval after the base eval has run.
        heldout_gain = self.heldout[1] - self.heldout[0] if len(self.heldout) == 2 else None
        metrics = {
            "canary/format_reward": row[2],
            "canary/reward_gain": reward_gain,
            "canary/heldout": float(rising and heldout_gain is not None and heldout_gain <= 0),
            "canary/format": float(rising and accuracy_gain <= 0 and format_gain > 0),
        }
        if heldout_gain is not None:
            metrics["canary/heldout_gain"] = heldout_gain
        return metrics

    def new_warnings(self, metrics: dict[str, float]) -> list[str]:
        """Messages for canaries that turned on with these metrics (each is announced once)."""
        messages = {
            "canary/heldout": "training reward is up {gain:+.3f} but held-out accuracy is not: "
            "the reward may be hackable (check samples in metrics and the reward's components)",
            "canary/format": "training reward is up {gain:+.3f} but training accuracy is not, "
            "while the format-only reward rose: the gain looks like form, not correctness",
        }
        fresh = [k for k in messages if metrics.get(k) and k not in self.raised]
        self.raised.update(fresh)
        return [messages[k].format(gain=metrics["canary/reward_gain"]) for k in fresh]
