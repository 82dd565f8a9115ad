"""LLM audit of environments: a judge model, served by any Engine, reads a problem (its statement,
hints included, and its reference answer) and says whether it is well posed, before training."""

from __future__ import annotations

import re

from transformers import PreTrainedTokenizerBase

from rlvr.rewards.judge import NO_REFERENCE, check_template
from rlvr.rollout.engine import Engine, SamplingParams
from rlvr.rollout.tokens import encode_prompt
from rlvr.types import Problem, Score

AUDIT_FIELDS = ("statement", "reference")

DEFAULT_AUDIT_RUBRIC = """\
Audit this task before a model is trained on it, rewarded when its final answer matches the \
reference answer.

[Task]
{statement}

[Reference answer]
{reference}

It is well posed if it can be solved from what it states, the reference answer is correct, and \
neither the task nor a hint in it gives the answer away. Reason briefly, then end with \
"Verdict: yes" (well posed) or "Verdict: no"."""

_VERDICT = re.compile(r"\bverdict\b[\s*_:=\-]*(yes|no)\b", re.IGNORECASE)
_BRACKETED = re.compile(r"\[\[\s*(yes|no)\s*\]\]", re.IGNORECASE)
_LAST_WORD = re.compile(r"\b(yes|no)\b[\W_]*\Z", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True (well posed) or False from the judge's reply, None when it holds no verdict.

    Tried in order, the last one found deciding: "Verdict: yes" (any case, markdown, ':' '=' or
    '-'), "[[no]]", and a reply whose last word is yes or no. A line that says both answers is
    the rubric echoed ('end with "Verdict: yes" or "Verdict: no"'), not a verdict."""
    echoed = False
    for pattern in (_VERDICT, _BRACKETED):
        said = []
        for line in text.splitlines():
            answers = {a.lower() for a in pattern.findall(line)}
            if len(answers) == 1:
                said.append(answers.pop())
            echoed = echoed or len(answers) == 2
        if said:
            return said[-1] == "yes"
    last = None if echoed else _LAST_WORD.search(text.strip())  # the echo's own last word
    return None if last is None else last.group(1).lower() == "yes"


def check_rubric(rubric: str) -> str:
    """`rubric` if it is a format string over AUDIT_FIELDS that shows the statement; else a
    ValueError naming the fields."""
    return check_template(rubric, AUDIT_FIELDS, "statement", "audit rubric")


def render_audit(rubric: str, problem: Problem) -> str:
    """`rubric` filled in for one problem: its messages (hints are in them) and its answer."""
    return rubric.format(
        statement="\n\n".join(m["content"] for m in problem.messages()),
        reference=NO_REFERENCE if problem.answer is None else problem.answer,
    )


class EnvironmentAudit:
    """Ask an Engine, greedily, whether each problem is well posed. Each verdict is a Score:
    1.0 well posed, 0.0 not, and status infra_error when the judge gave no usable verdict (its
    reply holds none, or its engine failed): that is the judge's failure, not the problem's, and
    the caller decides what it means."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: PreTrainedTokenizerBase,
        rubric: str,
        max_new_tokens: int,
        batch_size: int,
    ):
        self.engine, self.tokenizer, self.rubric = engine, tokenizer, check_rubric(rubric)
        self.sampling = SamplingParams(max_new_tokens, temperature=0.0)
        self.batch_size = batch_size

    def __call__(self, problems: list[Problem]) -> list[Score]:
        """One verdict per problem, `batch_size` problems per engine call."""
        verdicts = []
        for start in range(0, len(problems), self.batch_size):
            verdicts += self._audit(problems[start : start + self.batch_size])
        return verdicts

    def _audit(self, problems: list[Problem]) -> list[Score]:
        prompts = [
            encode_prompt(
                self.tokenizer, [{"role": "user", "content": render_audit(self.rubric, p)}]
            )
            for p in problems
        ]
        try:
            completions = self.engine.generate(prompts, self.sampling)
        except Exception as e:  # a judge that fails leaves its problems unaudited, not broken
            error = f"the judge's engine failed: {type(e).__name__}: {e}"
            return [Score(0.0, "infra_error", {"error": error}) for _ in problems]
        verdicts = []
        for completion in completions:
            verdict = parse_verdict(completion.text)
            if verdict is not None:
                verdicts.append(Score(float(verdict), "ok", {"judge_output": completion.text}))
                continue
            error = 'no "Verdict: yes" or "Verdict: no" in the judge\'s reply'
            if completion.finish_reason == "length":
                error += f" (cut at max_new_tokens={self.sampling.max_new_tokens})"
            verdicts.append(
                Score(0.0, "infra_error", {"error": error, "judge_output": completion.text})
            )
        return verdicts
