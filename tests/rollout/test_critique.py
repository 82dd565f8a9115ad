"""The critic's prompt layout and what it is shown of earlier replies."""

from rlvr.rewards.peer import answer_reader
from rlvr.rollout.critique import critic_problem, shown_text
from rlvr.types import Problem


def test_critic_problem_lists_every_rounds_answers_above_the_question():
    problem = Problem(id="p7", prompt="12+30=", answer="42", metadata={"a": 12})
    asked = critic_problem(problem, [["42", "32"], ["41"]])
    assert asked.messages() == [
        {"role": "user", "content": "Earlier answers:\n- 42\n- 32\n- 41\n\n12+30="}
    ]
    assert (asked.id, asked.answer, asked.metadata) == ("p7", "42", {"a": 12})
    assert problem.prompt == "12+30="  # the original is not touched


def test_critic_problem_edits_the_last_user_message_only():
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "2+2="},
    ]
    asked = critic_problem(Problem(id="q", prompt=chat, answer="4"), [["5"]]).messages()
    assert asked[:3] == chat[:3]
    assert asked[3] == {"role": "user", "content": "Earlier answers:\n- 5\n\n2+2="}


def test_shown_text_is_the_read_answer_or_the_whole_reply():
    read = answer_reader("numeric", {})  # the arithmetic task's verifier, no fallback
    assert shown_text("7+5+0=12 #### 1,032\n", "answers", read) == "1032"
    assert shown_text("7+5+0=12", "answers", read) == "(no answer)"
    assert shown_text("  7+5+0=12 #### 1032\n", "replies", read) == "7+5+0=12 #### 1032"
