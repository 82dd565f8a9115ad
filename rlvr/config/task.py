"""The `task` section: where problems come from and how replies are scored; a task's own
parameters ride along as extra keys."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TaskConfig(BaseModel):
    """Built-in settings plus the task's own parameters (validated against the task's `Params`)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str = Field(
        "arithmetic", description="Task name from `rlvr list tasks`, or `module:Class`."
    )
    eval_size: int = Field(200, gt=0, description="Number of held-out problems used for eval.")
    paraphrase: bool = Field(
        False,
        description="Show every prompt reworded by its task (same problems, same answers): "
        "arithmetic and target_string reword their own, jsonl reads task.paraphrase_field. "
        "Co-RL's diversity knob, the one task key a cohort member may set.",
    )
    rewards: dict[str, float] = Field(
        default_factory=dict,
        description="Reward components and weights, e.g. {numeric = 1.0, format = 0.1}. "
        "Empty means the task's own verifier with weight 1.",
    )
    reward_mode: Literal["sum", "gated"] = Field(
        "sum",
        description="How task.rewards combine: 'sum' (weighted sum) or 'gated' (in the order "
        "given, each component counts only once all earlier ones scored 1.0).",
    )
    reward_params: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Settings of rewards that take them, by reward name, e.g. "
        "{code = {all_or_nothing = true, limits = {wall_seconds = 5}}}; each reward's keys are in "
        "docs/config.md (task.reward_params.code, task.reward_params.judge, ...).",
    )
    reward_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds a reward may take on one response before it scores 0 with status "
        "'timeout' (a hung reward never stops training).",
    )
    long_prompts: Literal["error", "skip", "truncate"] = Field(
        "error",
        description="File-backed tasks (jsonl): what to do with a prompt that does not fit the "
        "model's context minus rollout.max_new_tokens: 'error' stops before any work naming the "
        "file and line, 'skip' drops the row, 'truncate' cuts the prompt's longest message from "
        "the start (its end, where the question usually is, is kept).",
    )

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
