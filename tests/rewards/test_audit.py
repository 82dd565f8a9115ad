import pytest

from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.rewards.audit import (
    DEFAULT_AUDIT_RUBRIC,
    EnvironmentAudit,
    check_rubric,
    parse_verdict,
    render_audit,
)
from rlvr.rollout.hf_engine import HFEngine
from rlvr.tasks.hints import hinted
from rlvr.types import Problem

# (judge reply, verdict: True well posed, False not, None unusable)
GOLDEN = [
    ("Verdict: yes", True),
    ("The reference is 85, which is right.\nVerdict: Yes.", True),
    ("**Verdict:** NO", False),
    ("verdict = no", False),
    ("Verdict - yes", True),
    ("[[no]]", False),
    ("The sum is right. Yes", True),
    ("no.", False),
    # the last verdict decides, and a labelled one beats a trailing word
    ("Verdict: no at first; on reflection\nVerdict: yes", True),
    ("Verdict: no. Is it solvable? Yes", False),
    ("[[yes]] Verdict: no", False),
    # the rubric echoed is no verdict; one after it is
    ('End with "Verdict: yes" or "Verdict: no".', None),
    ('End with "Verdict: yes" or "Verdict: no".\nVerdict: no', False),
    # unusable: none, a word inside another, a verdict that is not yes/no
    ("", None),
    ("The task is fine", None),
    ("Verdict: maybe", None),
    ("I cannot say; nobody knows", None),
    ("Verdict: yesterday's answer", None),
]


@pytest.mark.parametrize("text, expected", GOLDEN)
def test_parse_verdict(text, expected):
    assert parse_verdict(text) is expected, text


def test_the_rubric_shows_statement_hint_and_reference():
    problem = hinted(Problem("p", "37+48=", "85"), "the answer is 85")
    text = render_audit(DEFAULT_AUDIT_RUBRIC, problem)
    assert "[Task]\n37+48=\n\nHint: the answer is 85\n\n[Reference answer]\n85\n" in text
    assert "(none given)" in render_audit("{statement} {reference}", Problem("q", "hi"))


def test_a_rubric_must_show_the_statement_and_name_known_fields():
    assert check_rubric("{statement} ref {reference}")
    with pytest.raises(ValueError, match=r"unknown audit rubric fields \['response'\]"):
        check_rubric("{statement} {response}")
    with pytest.raises(ValueError, match=r"never shows the judge the \{statement\}"):
        check_rubric("Reference: {reference}")


class FailingEngine:
    """An engine whose server has gone away."""

    def generate(self, prompts, params, seeds=None):
        raise RuntimeError("connection refused")


def test_a_judge_without_a_verdict_is_unusable_not_a_verdict():
    tokenizer = build_tokenizer()
    engine = HFEngine(build_model("nano", tokenizer, seed=0), tokenizer)
    audit = EnvironmentAudit(engine, tokenizer, "{statement} {reference}", 4, 2)
    problems = [Problem(f"p{i}", f"{i}+1=", str(i + 1)) for i in range(3)]
    verdicts = audit(problems)  # an untrained model says no verdict in 4 tokens
    assert [v.status for v in verdicts] == ["infra_error"] * 3
    assert verdicts[0].info["error"].endswith("(cut at max_new_tokens=4)")
    failing = EnvironmentAudit(FailingEngine(), tokenizer, "{statement}", 4, 2)(problems)
    assert [v.status for v in failing] == ["infra_error"] * 3
    assert failing[2].info["error"] == "the judge's engine failed: RuntimeError: connection refused"
