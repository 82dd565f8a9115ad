"""The `cohort` and `debate` sections: several policies trained side by side (Co-RL), or a
generator and a critic on one base (MADA-RL)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlvr.config.base import Section


class CohortConfig(Section):
    members: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Co-RL: train several policies side by side, one per entry, each the run's "
        'config plus that entry\'s dotted overrides (e.g. {"train.seed" = 1}; {} for the run '
        "as written). They share no parameters and answer the same problems each step. Empty: "
        "one ordinary run.",
    )
    reward: Literal["peer", "self", "label"] = Field(
        "peer",
        description="What each member is rewarded for: 'peer' (Co-RL) agreeing with the "
        "majority answer of the member before it in a ring, 'self' (TTRL) with its own "
        "majority, 'label' the task's verifier as usual (the supervised control).",
    )


class DebateConfig(Section):
    rounds: int = Field(
        0,
        ge=0,
        description="MADA-RL: 0 = an ordinary run; n >= 2 = generator and critic roles as two "
        "LoRA adapters on one frozen base. Round 1 the generator samples rollout.group_size "
        "answers a problem; in each later round the critic answers again, shown `shown` answers "
        "of every earlier round. Both roles train; needs model.lora.r > 0 and rollout.engine "
        "= 'hf'.",
    )
    shown: int = Field(
        3, gt=0, description="Answers of each earlier round the critic is shown (<= group_size)."
    )
    show: Literal["answers", "replies"] = Field(
        "answers",
        description="What the critic sees of each shown answer: its final answer as the task's "
        "verifier reads it, or the whole reply.",
    )
    critic: dict[str, Any] = Field(
        default_factory=lambda: {"algo.advantage": "counterfactual"},
        description="The critic role's dotted overrides of the run's config (algo., train.lr, "
        "model.lora., ...). The default trains it with MADA's counterfactual advantage (reward "
        'minus the shown generator answers\' mean reward); {"algo.advantage" = "grpo"} is the '
        "plain-GRPO control.",
    )
