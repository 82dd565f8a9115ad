from rlvr.rollout.guidance import (
    Guidance,
    hinted,
    kept_revisions,
    on_original_prompt,
    rationale_segments,
)
from rlvr.types import Problem, Trajectory


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


def rollout(problem: str, tokens: list[int], reply_from: int, reward: float, status="ok"):
    mask = [0] * reply_from + [1] * (len(tokens) - reply_from)
    return Trajectory(
        Problem(problem, "x"), 0, 0, tokens, mask, [-0.5] * len(tokens), [reward], [len(tokens)],
        status=status, correct=reward > 0,
    )  # fmt: skip


def test_revisions_are_kept_only_when_they_beat_every_unguided_rollout():
    unguided = [rollout("a", [1, 2, 9], 2, 0.0), rollout("a", [1, 2, 8], 2, 0.5)]
    unguided += [rollout("b", [1, 3, 7], 2, 0.0)]
    revised = [
        rollout("a", [1, 2, 5, 5, 9], 4, 0.5),  # ties the best: not kept
        rollout("a", [1, 2, 5, 5, 6], 4, 1.0),
        rollout("b", [1, 3, 5, 5, 6], 4, 1.0, status="infra_error"),
        rollout("b", [1, 3, 5, 5, 4, 4], 4, 1.0),
    ]
    kept = kept_revisions(unguided, revised)
    assert [(r.token_ids, u.problem.id) for r, u in kept] == [
        ([1, 2, 5, 5, 6], "a"),
        ([1, 3, 5, 5, 4, 4], "b"),
    ]


def test_a_kept_revision_is_taught_on_the_prompt_without_the_hint():
    unguided = rollout("a", [1, 2, 9], 2, 0.0)  # prompt [1, 2]
    revised = rollout("a", [1, 2, 5, 5, 6, 7], 4, 1.0)  # hinted prompt [1, 2, 5, 5]
    out = on_original_prompt(revised, unguided)
    assert out.token_ids == [1, 2, 6, 7]
    assert out.loss_mask == [0, 0, 1, 1]
    assert out.behaviour_logprobs == [0.0, 0.0, -0.5, -0.5]
    assert out.turn_ends == [4] and out.reward == 1.0


def test_levels_rise_on_failure_fall_on_success_and_stay_in_range():
    guidance = Guidance(segments=2)
    fail, win = rollout("a", [1, 2], 1, 0.0), rollout("a", [1, 2], 1, 1.0)
    problem = fail.problem
    assert guidance.hint(problem, "one\ntwo\n") is None  # never failed
    guidance.observe([fail, fail])
    assert guidance.hint(problem, "one\ntwo\n").prompt == "x\n\nHint: one\n"
    for _ in range(3):
        guidance.observe([fail])
    assert guidance.levels["a"] == 2  # all segments at most
    guidance.observe([fail, win])  # one correct rollout solves the group
    assert guidance.levels["a"] == 1
    state = guidance.state_dict()
    guidance.observe([win, win])
    assert "a" not in guidance.levels  # solved problems leave the state
    guidance.load_state_dict(state)
    assert guidance.levels["a"] == 1
