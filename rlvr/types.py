"""The records that flow through the loop: problems in, scored trajectories out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, str]  # {"role": "user" | "assistant" | "system", "content": str}

Status = Literal["ok", "wrong", "timeout", "crash", "infra_error"]
STATUSES: tuple[Status, ...] = ("ok", "wrong", "timeout", "crash", "infra_error")


@dataclass(frozen=True)
class Problem:
    """One prompt and whatever its verifier needs to check an answer."""

    id: str
    prompt: str | list[Message]
    answer: str | None = None
    domain: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)

    def messages(self) -> list[Message]:
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return list(self.prompt)


@dataclass(frozen=True)
class Score:
    """A reward's verdict. Model-caused failures are `wrong`; `infra_error` is not the model's fault."""

    value: float
    status: Status = "ok"
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    """What an Env returns for one action. The observation is the next user turn (a string) or
    messages of other roles (e.g. {"role": "tool", ...}); None when the episode is done."""

    observation: str | Message | list[Message] | None
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class SideRow:
    """Tokens an episode sampled in a context other than its own token_ids (e.g. a thread
    dispatched blind to its siblings), trained as a sequence of their own with the
    episode's advantage: that context, then the tokens. Per-token fields are aligned with
    `token_ids`, as in a Trajectory."""

    token_ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float]


@dataclass
class Trajectory:
    """All tokens of one episode; the single record rewards, advantages and losses read.

    `token_ids`, `loss_mask` and `behaviour_logprobs` are aligned per token: the mask is 1
    only on tokens the policy generated, and the logprob is the sampler's (0 elsewhere).
    """

    problem: Problem
    group_id: int
    sample_index: int
    token_ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float]
    turn_rewards: list[float]
    turn_ends: list[int]  # token index one past the last policy token of each turn
    status: Status = "ok"
    correct: bool = False
    finish_reason: str = "eos"
    response_text: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    # the policy version (updates done) that sampled each token, aligned with token_ids; -1 on
    # tokens the policy did not generate
    versions: list[int] = field(default_factory=list)
    # response tokens the engine generated but kept out of loss_mask (Completion.trained)
    untrained_tokens: int = 0
    # what the episode sampled in other contexts, trained as rows of their own (SideRow)
    side_rows: list[SideRow] = field(default_factory=list)

    def stamp(self, version: int) -> None:
        """Record that the policy at `version` generated every policy token."""
        self.versions = [version if m else -1 for m in self.loss_mask]

    @property
    def reward(self) -> float:
        return float(sum(self.turn_rewards))

    @property
    def num_generated(self) -> int:
        return int(sum(self.loss_mask)) + self.untrained_tokens


@dataclass
class Batch:
    """Trajectories as right-padded tensors. Per-token fields are aligned with *targets*:
    column t describes token t+1, the one predicted from position t."""

    input_ids: Any  # [B, T] long
    attention_mask: Any  # [B, T] long
    loss_mask: Any  # [B, T-1] float
    behaviour_logprobs: Any  # [B, T-1] float
    rewards: Any  # [B] float
    group_ids: Any  # [B] long
    token_rewards: Any  # [B, T-1] float: each turn's reward on that turn's last policy token
    turn_ids: Any  # [B, T-1] long: the turn each policy token belongs to, -1 elsewhere
    turn_rewards: Any  # [B, K] float: each turn's reward, NaN past the episode's last turn

    @classmethod
    def from_trajectories(cls, trajectories: list[Trajectory], pad_id: int) -> Batch:
        import torch

        width = max(len(t.token_ids) for t in trajectories)
        size = len(trajectories)
        input_ids = torch.full((size, width), pad_id, dtype=torch.long)
        attention = torch.zeros((size, width), dtype=torch.long)
        loss_mask = torch.zeros((size, width))
        behaviour = torch.zeros((size, width))
        token_rewards = torch.zeros((size, width))
        turn_ids = torch.full((size, width), -1, dtype=torch.long)
        turns = max(len(t.turn_rewards) for t in trajectories)
        turn_rewards = torch.full((size, max(turns, 1)), float("nan"))
        for row, t in enumerate(trajectories):
            n = len(t.token_ids)
            input_ids[row, :n] = torch.tensor(t.token_ids)
            attention[row, :n] = 1
            loss_mask[row, :n] = torch.tensor(t.loss_mask, dtype=torch.float)
            behaviour[row, :n] = torch.tensor(t.behaviour_logprobs)
            start = 0
            for turn, (reward, end) in enumerate(zip(t.turn_rewards, t.turn_ends)):
                token_rewards[row, end - 1] += reward
                turn_ids[row, start:end] = turn
                turn_rewards[row, turn] = reward
                start = end
            turn_ids[row, :n][loss_mask[row, :n] == 0] = -1
        return cls(
            input_ids=input_ids,
            attention_mask=attention,
            loss_mask=loss_mask[:, 1:],
            behaviour_logprobs=behaviour[:, 1:],
            rewards=torch.tensor([t.reward for t in trajectories], dtype=torch.float),
            group_ids=torch.tensor([t.group_id for t in trajectories], dtype=torch.long),
            token_rewards=token_rewards[:, 1:],
            turn_ids=turn_ids[:, 1:],
            turn_rewards=turn_rewards,
        )

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def concat(self, other: Batch, pad_id: int) -> Batch:
        """This batch's rows, then `other`'s, each field right-padded to the wider of the two."""
        import torch

        fill = {"input_ids": pad_id, "turn_ids": -1, "turn_rewards": float("nan")}
        joined = {}
        for name, mine in vars(self).items():
            theirs = getattr(other, name)
            if mine.dim() == 1:
                joined[name] = torch.cat([mine, theirs])
            else:
                width, value = max(mine.shape[1], theirs.shape[1]), fill.get(name, 0)
                joined[name] = torch.cat([
                    torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)
                    for x in (mine, theirs)
                ])  # fmt: skip
        return Batch(**joined)

    def rows(self, index: list[int]) -> Batch:
        """The batch of these rows only, in this order (same width)."""
        return Batch(**{name: value[index] for name, value in vars(self).items()})
