"""A learned reward: a Hugging Face sequence-classification model scores prompt plus response."""

from __future__ import annotations

import inspect
import math

import torch
from pydantic import Field
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlvr.models.loading import (
    DTYPES,
    LoadSettings,
    ModelNotFoundError,
    from_pretrained,
    resolve_device,
)
from rlvr.rewards.batching import Batcher
from rlvr.types import Problem, Score

KEY = "task.reward_params.reward_model.model"


class RewardModelParams(LoadSettings):
    model: str = Field(
        description="Hugging Face hub id or local directory of a sequence-classification reward "
        "model with a single output (num_labels=1)."
    )
    scale: float = Field(1.0, description="The reward is scale * logit + shift (then sigmoid).")
    shift: float = Field(
        0.0, description="Added after scaling; e.g. minus the logit's mean on typical responses."
    )
    sigmoid: bool = Field(
        False, description="Squash scale * logit + shift into (0, 1) with a sigmoid."
    )
    batch_size: int = Field(
        16, gt=0, description="Most responses scored in one forward pass (padded together)."
    )


def load_reward_model(
    name: str, dtype: str = "float32", trust_remote_code: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a single-logit classifier and its tokenizer; ModelNotFoundError says how to fix it."""
    tokenizer = from_pretrained(AutoTokenizer, name, KEY, trust_remote_code=trust_remote_code)
    model, loading = from_pretrained(
        AutoModelForSequenceClassification,
        name,
        KEY,
        dtype=DTYPES[dtype],
        trust_remote_code=trust_remote_code,
        output_loading_info=True,
    )
    # A causal LM loads "fine" as a classifier, with a freshly initialised (random) head.
    if loading["missing_keys"]:
        missing = ", ".join(sorted(loading["missing_keys"]))
        raise ModelNotFoundError(
            f"{name!r} is not a reward model: its checkpoint lacks {missing}, so scores would be "
            f"random. Fix: point {KEY} at a model trained for sequence classification."
        )
    if model.config.num_labels != 1:
        raise ModelNotFoundError(
            f"{name!r} has {model.config.num_labels} output labels; a reward model has one "
            f"(num_labels=1). Fix: point {KEY} at a single-score reward model."
        )
    if tokenizer.pad_token_id is None:  # batches need one; the attention mask hides it
        tokenizer.pad_token = tokenizer.eos_token
    # The head reads the last token that is not padding, so the model must know the pad id.
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


class RewardModel:
    """A learned reward model's score (its logit, optionally rescaled) for prompt plus response."""

    Params = RewardModelParams

    def __init__(self, params: RewardModelParams):
        self.params = params
        model, self.tokenizer = load_reward_model(
            params.model, params.dtype, params.trust_remote_code
        )
        self.model = model.to(resolve_device(params.device)).eval()
        # Left padding shifts absolute positions; a decoder must count them from each row's
        # first real token. (Right padding leaves them alone, and encoders like RoBERTa derive
        # their own from the input ids, so they get none.)
        self.pass_positions = (
            self.tokenizer.padding_side == "left"
            and "position_ids" in inspect.signature(self.model.forward).parameters
        )
        self.batcher = Batcher(self._score_items, params.batch_size)

    def __call__(self, problem: Problem, response: str) -> Score:
        return self.batcher((problem, response))

    def score_batch(self, problems: list[Problem], responses: list[str]) -> list[Score]:
        """Score all pairs directly, `batch_size` of them per forward pass."""
        size = self.params.batch_size
        return [
            score
            for start in range(0, len(problems), size)
            for score in self._score_chunk(
                problems[start : start + size], responses[start : start + size]
            )
        ]

    def _score_items(self, items: list[tuple[Problem, str]]) -> list[Score]:
        return self._score_chunk([p for p, _ in items], [r for _, r in items])

    @torch.no_grad()
    def _score_chunk(self, problems: list[Problem], responses: list[str]) -> list[Score]:
        inputs = self._encode(problems, responses).to(self.model.device)
        if self.pass_positions:
            inputs["position_ids"] = (inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        logits = self.model(**inputs).logits[:, 0].float()
        values = logits * self.params.scale + self.params.shift
        if self.params.sigmoid:
            values = values.sigmoid()
        return [self._score(v, logit) for v, logit in zip(values.tolist(), logits.tolist())]

    def _encode(self, problems: list[Problem], responses: list[str]):
        if self.tokenizer.chat_template is not None:
            texts = [
                self.tokenizer.apply_chat_template(
                    problem.messages() + [{"role": "assistant", "content": response}],
                    tokenize=False,
                )
                for problem, response in zip(problems, responses)
            ]
            # The template already holds any BOS/EOS the model was trained with.
            return self.tokenizer(
                texts, add_special_tokens=False, padding=True, return_tensors="pt"
            )
        # No template: the classic (question, answer) text pair, joined by the tokenizer's own
        # separators, as BERT-style reward models were trained.
        prompts = ["\n\n".join(m["content"] for m in problem.messages()) for problem in problems]
        return self.tokenizer(prompts, responses, padding=True, return_tensors="pt")

    @staticmethod
    def _score(value: float, logit: float) -> Score:
        if not math.isfinite(value):
            return Score(0.0, "crash", {"error": f"reward model gave {value} (logit {logit})"})
        # A reward model has no notion of correct: any finite score is a valid verdict.
        return Score(value, "ok", {"logit": logit})
