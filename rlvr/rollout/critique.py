"""A debate's critic prompt (MADA-RL): the answers of earlier rounds above the question, so
warm start and rollouts show the critic the same layout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from rlvr.types import Problem


def critic_problem(problem: Problem, shown: list[list[str]]) -> Problem:
    """`problem` as the critic sees it: each earlier round's shown answers, then the question;
    answer and id unchanged, so the same verifier scores the critic's reply."""
    lines = ["Earlier answers:"] + [f"- {answer}" for answers in shown for answer in answers]
    messages = problem.messages()
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    content = "\n".join(lines) + "\n\n" + messages[last]["content"]
    messages[last] = dict(messages[last], content=content)
    return replace(problem, prompt=messages)


def shown_text(reply: str, show: str, answer: Callable[[str], str | None]) -> str:
    """What the critic is shown of one earlier reply: the whole reply (show = 'replies'), or its
    final answer as the verifier reads it ('answers')."""
    if show == "replies":
        return reply.strip()
    read = answer(reply)
    return "(no answer)" if read is None else read
