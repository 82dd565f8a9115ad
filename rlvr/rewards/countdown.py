"""Check a countdown answer: an arithmetic expression that uses the given numbers to hit the target.

The expression is parsed into an AST and only whitelisted nodes are evaluated; it is never run.
"""

from __future__ import annotations

import ast
import operator
import re
from collections import Counter
from fractions import Fraction

from rlvr.rewards.answers import marked_answer
from rlvr.types import Problem, Score

_ALLOWED_CHARS = re.compile(r"[0-9 +\-*/()]+")
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_MAX_CHARS = 200


class Rejected(ValueError):
    """The expression breaks a rule; the message is the reason."""


def final_expression(response: str) -> str:
    """The text after the final-answer marker, else the last non-empty line."""
    marked = marked_answer(response)
    if marked is not None:
        return marked[0]
    lines = [line.strip() for line in response.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _evaluate(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left, used), _evaluate(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise Rejected("division by zero")
        return _OPS[type(node.op)](left, right)
    raise Rejected(
        f"only integers, + - * / and parentheses are allowed, found {type(node).__name__}"
    )


def evaluate_expression(expression: str) -> tuple[Fraction, list[int]]:
    """The exact value of `expression` and the integer literals it uses; raises Rejected."""
    if len(expression) > _MAX_CHARS:
        raise Rejected(f"expression too long (over {_MAX_CHARS} characters)")
    if not _ALLOWED_CHARS.fullmatch(expression):
        raise Rejected("only integers, + - * / and parentheses are allowed")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError) as e:
        raise Rejected(f"not an expression ({type(e).__name__})") from None
    used: list[int] = []
    return _evaluate(tree.body, used), used


def countdown_check(problem: Problem, response: str) -> Score:
    """Final expression uses each given number at most once, only + - * / and (), and equals the target."""
    numbers, target = problem.metadata["numbers"], problem.metadata["target"]
    expression = final_expression(response)
    try:
        value, used = evaluate_expression(expression)
    except Rejected as e:
        return Score(0.0, "wrong", {"reason": str(e)})
    extra = Counter(used) - Counter(numbers)
    if extra:
        return Score(
            0.0,
            "wrong",
            {"reason": f"uses numbers not given (or too often): {sorted(extra.elements())}"},
        )
    if value != target:
        return Score(0.0, "wrong", {"reason": f"expression equals {value}, not {target}"})
    return Score(1.0, "ok")
