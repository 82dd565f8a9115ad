"""Hints: a rationale cut into segments that join back, and a hinted prompt."""

from rlvr.tasks.hints import hinted, rationale_segments
from rlvr.types import Problem


def test_segments_cut_whole_lines_and_join_back():
    rationale = "a\nbb\nccc\ndddd\n#### 7"
    parts = rationale_segments(rationale, 2)
    assert parts == ["a\nbb\nccc\n", "dddd\n#### 7"]
    assert "".join(rationale_segments(rationale, 4)) == rationale


def test_segments_of_a_one_line_rationale_cut_words_then_characters():
    rationale = "8+6+0=14 2+2+1=5 4+1+0=5  #### 554"
    # five words: three, then two
    assert rationale_segments(rationale, 2) == ["8+6+0=14 2+2+1=5 4+1+0=5  ", "#### 554"]
    assert rationale_segments("#### 42", 3) == ["###", "# ", "42"]


def test_hints_go_after_the_last_user_message():
    problem = Problem("p", "What is 2+2?", answer="4")
    assert hinted(problem, "2+2").prompt == "What is 2+2?\n\nHint: 2+2"
    chat = Problem(
        "q", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}], "5"
    )
    out = hinted(chat, "add")
    assert out.prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+3?\n\nHint: add"},
    ]
    assert (out.id, out.answer) == ("q", "5") and chat.prompt[1]["content"] == "2+3?"
