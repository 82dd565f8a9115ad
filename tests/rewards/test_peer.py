"""Majority votes and agreement rewards, with answers read the way each verifier reads them."""

from rlvr.rewards.peer import ANSWER_KEYS, agreement_rewards, majority_vote


def test_majority_vote_counts_ignores_no_answer_and_breaks_ties_by_first_seen():
    assert majority_vote(["7", None, "5", "7", None, None]) == "7"
    assert majority_vote(["5", "7", "7", "5"]) == "5"  # tie: the first one seen
    assert majority_vote(["7", "5", "5", "7"]) == "7"
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


def test_agreement_rewards_against_the_label():
    assert agreement_rewards(["7", "5", None], "7") == [1.0, 0.0, 0.0]
    assert agreement_rewards(["7", None], None) == [0.0, 0.0]


def test_numeric_answers_vote_as_numbers():
    key = ANSWER_KEYS["numeric"]
    replies = ["so #### 1,234", "#### 1234.0", "\\boxed{2468/2}", "#### 1233", "about 1234"]
    answers = [key(r, "none") for r in replies]
    assert answers[:3] == [answers[0]] * 3 and answers[3] != answers[0]
    assert answers[4] is None  # no marker: no answer, unless the verifier falls back
    assert key("about 1234", "last_number") == answers[0]


def test_replies_vote_whole_and_marked_answers_normalised():
    assert ANSWER_KEYS["exact_reply"]("hello", "none") == "hello"
    assert ANSWER_KEYS["exact_reply"]("hello ", "none") != "hello"  # exact_reply keeps spaces
    assert ANSWER_KEYS["exact_reply"]("", "none") is None
    assert ANSWER_KEYS["exact"]("#### Paris.", "none") == ANSWER_KEYS["exact"]("#### Paris", "none")
