"""LLM-as-judge rewards: an Engine grades each response by a rubric and the score is parsed from
its reply; a reply without a usable score is the judge's failure (infra_error), not the policy's."""

from __future__ import annotations

import re
import string

from pydantic import Field, field_validator
from transformers import PreTrainedTokenizerBase

from rlvr.models.loading import LoadSettings, load_model, resolve_device
from rlvr.rewards.batching import Batcher
from rlvr.rollout.engine import Completion, Engine, SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.tokens import encode_prompt
from rlvr.types import Problem, Score

KEY = "task.reward_params.judge.model"
RUBRIC_FIELDS = ("question", "response", "reference", "scale")
NO_REFERENCE = "(none given)"


def check_template(template: str, known: tuple[str, ...], required: str, name: str) -> str:
    """`template` if it is a format string over the `known` fields that shows `required`; else a
    ValueError naming the fields (a judge's rubric, River's audit rubric)."""
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    unknown = fields - set(known)
    if unknown:
        raise ValueError(
            f"unknown {name} fields {sorted(unknown)}; the fields are "
            f"{', '.join('{' + f + '}' for f in known)} (write literal braces as {{{{ }}}})"
        )
    if required not in fields:
        raise ValueError(f"the {name} never shows the judge the {{{required}}}")
    return template


DEFAULT_RUBRIC = """\
You are an impartial judge. Rate the response to the question below for correctness, \
completeness and clarity, on a scale from 0 (useless or wrong) to {scale}. If a reference \
answer is given, treat it as correct.

[Question]
{question}

[Reference answer]
{reference}

[Response]
{response}

Justify your rating in one or two sentences, then give it on the last line exactly as \
"Score: N/{scale}"."""

# A number not glued to a word or another number ("1-5" holds a 5, not a -5).
_NUMBER = r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w])"
_SEP = r"[ \t*_:=]*"  # spaces, markdown emphasis and ':' / '=' between a label and its number
_OUT_OF = rf"{_SEP}(?:/|\bout\s+of\b){_SEP}"
# Most explicit first; within a kind the last match wins, as judges end with their verdict.
_BRACKETED = re.compile(rf"\[\[\s*({_NUMBER})\s*(?:/\s*({_NUMBER})\s*)?\]\]")
_LABELLED = re.compile(
    rf"\b(?:score|rating|grade)\b{_SEP}(?:\([^)\n]*\){_SEP})?(?:(?:is|of)\b{_SEP})?"
    rf"({_NUMBER})(?:{_OUT_OF}({_NUMBER}))?",
    re.IGNORECASE,
)
_FRACTION = re.compile(rf"({_NUMBER}){_OUT_OF}({_NUMBER})", re.IGNORECASE)
_DENOMINATOR = re.compile(rf"{_OUT_OF}{_NUMBER}", re.IGNORECASE)
_BARE = re.compile(_NUMBER)


def parse_judge_score(text: str, scale: float) -> float | None:
    """The judge's score normalised to [0, 1], or None when `text` holds no usable score.

    Tried in order, the last match of the first kind found deciding: "[[8]]", a labelled
    "Score: 8/10" / "Rating: 4 out of 5" / "grade is 7", a fraction "8/10" over `scale`, and
    finally the last bare number. A stated scale other than `scale`, or a score outside
    [0, scale], makes the reply unusable rather than guessed at.
    """
    for pattern in (_BRACKETED, _LABELLED):
        matches = pattern.findall(text)
        if matches:
            return _normalise(*matches[-1], scale)
    # Fractions over another denominator ("3/4 of the steps") are not the score.
    fractions = [(n, d) for n, d in _FRACTION.findall(text) if float(d) == scale]
    if fractions:
        return _normalise(*fractions[-1], scale)
    # A denominator alone, as in an echoed "Score: N/10", is not a score either.
    bare = _BARE.findall(_DENOMINATOR.sub(" ", text))
    return _normalise(bare[-1], "", scale) if bare else None


def _normalise(number: str, denominator: str, scale: float) -> float | None:
    if denominator and float(denominator) != scale:
        return None
    value = float(number)
    return value / scale if 0 <= value <= scale else None


class JudgeParams(LoadSettings):
    model: str = Field(
        description="Hugging Face hub id or local directory of the judge: an instruct model "
        "with a chat template."
    )
    rubric: str = Field(
        DEFAULT_RUBRIC,
        description="The judge's prompt, a format string with the fields {question}, "
        "{response}, {reference} (the problem's answer, or '(none given)') and {scale}; "
        "write literal braces as {{ }}.",
    )
    scale: float = Field(
        10.0, gt=0, description="The rubric's top score; scores in [0, scale] map to [0, 1]."
    )
    max_new_tokens: int = Field(
        256, gt=0, description="Longest judge reply; a reply cut before its score is unusable."
    )
    batch_size: int = Field(16, gt=0, description="Most responses graded in one engine call.")

    @field_validator("rubric")
    @classmethod
    def _known_fields(cls, rubric: str) -> str:
        return check_template(rubric, RUBRIC_FIELDS, "response", "rubric")


class LLMJudge:
    """Grade responses by prompting any Engine with a rubric and parsing the score it gives."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: PreTrainedTokenizerBase,
        rubric: str,
        scale: float,
        max_new_tokens: int,
        batch_size: int,
    ):
        self.engine, self.tokenizer = engine, tokenizer
        self.rubric, self.scale = rubric, scale
        self.sampling = SamplingParams(max_new_tokens, temperature=0.0)  # greedy: same verdict
        self.batcher = Batcher(self._score_items, batch_size)

    def __call__(self, problem: Problem, response: str) -> Score:
        return self.batcher((problem, response))

    def score_batch(self, problems: list[Problem], responses: list[str]) -> list[Score]:
        """Grade all pairs with one engine call."""
        prompts = [
            encode_prompt(self.tokenizer, [{"role": "user", "content": self.render(p, r)}])
            for p, r in zip(problems, responses)
        ]
        return [self._score(c) for c in self.engine.generate(prompts, self.sampling)]

    def render(self, problem: Problem, response: str) -> str:
        """The rubric filled in for one response."""
        return self.rubric.format(
            question="\n\n".join(m["content"] for m in problem.messages()),
            response=response,
            reference=NO_REFERENCE if problem.answer is None else problem.answer,
            scale=f"{self.scale:g}",
        )

    def _score_items(self, items: list[tuple[Problem, str]]) -> list[Score]:
        return self.score_batch([p for p, _ in items], [r for _, r in items])

    def _score(self, completion: Completion) -> Score:
        value = parse_judge_score(completion.text, self.scale)
        if value is not None:  # a grade, not a verdict: any usable score is ok, as for an RM
            return Score(value, "ok", {"judge_output": completion.text})
        error = f"no score in [0, {self.scale:g}] found in the judge's reply"
        if completion.finish_reason == "length":
            error += f" (cut at max_new_tokens={self.sampling.max_new_tokens})"
        return Score(0.0, "infra_error", {"error": error, "judge_output": completion.text})


class HFJudge(LLMJudge):
    """An LLM judge (local or hub model) grades each response by a rubric, scaled to [0, 1]."""

    Params = JudgeParams

    def __init__(self, params: JudgeParams):
        model, tokenizer = load_model(params.model, params.dtype, params.trust_remote_code, key=KEY)
        model = model.to(resolve_device(params.device)).eval()
        super().__init__(
            HFEngine(model, tokenizer, params.batch_size),
            tokenizer,
            params.rubric,
            params.scale,
            params.max_new_tokens,
            params.batch_size,
        )
