"""Integer arithmetic ("347+285=") with column-by-column scratchpad demonstrations."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlvr.tasks.base import GeneratedTask
from rlvr.tasks.paraphrase import reworded
from rlvr.types import Problem

SYMBOLS = {"add": "+", "sub": "-", "mul": "*"}
# task.paraphrase: the same sum in words, one wording per problem
REWORDINGS = {
    "add": ("What is {a} plus {b}?", "Add {a} and {b}."),
    "sub": ("What is {a} minus {b}?", "Subtract {b} from {a}."),
    "mul": ("What is {a} times {b}?", "Multiply {a} by {b}."),
}


class ArithmeticParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operations: list[Literal["add", "sub", "mul"]] = Field(
        default=["add"],
        min_length=1,
        description="Operations to draw from, uniformly: add, sub, mul.",
    )
    digits: int | list[int] = Field(
        3,
        description="Digits of each operand (of the first one for mul); a list = each problem "
        "draws its digits from it uniformly, so problems differ in difficulty (e.g. [1, 2, 3, 4]).",
    )
    mul_digits: int = Field(1, ge=1, le=9, description="Digits of the second operand of mul.")
    scratchpad: Literal["short", "long"] = Field(
        "short",
        description="mul by a multi-digit number: 'short' writes one line per partial product, "
        "'long' works each partial product digit by digit and then sums them column by column "
        "(hundreds of tokens at 4 x 3 digits and up).",
    )

    @field_validator("digits")
    @classmethod
    def _digit_counts(cls, digits: int | list[int]) -> int | list[int]:
        counts = digits if isinstance(digits, list) else [digits]
        if not counts or not all(1 <= n <= 9 for n in counts):
            raise ValueError("takes a digit count from 1 to 9, or a non-empty list of them")
        return digits


def _digits(n: int, width: int) -> list[int]:
    """Least significant digit first, zero-padded to width."""
    return [int(d) for d in str(n).rjust(width, "0")[::-1]]


def _from_columns(columns: list[int]) -> str:
    """The answer the columns spell: each column's last digit, the top column in full."""
    text = str(columns[-1]) + "".join(str(c % 10) for c in reversed(columns[:-1]))
    return str(int(text))


def _add(a: int, b: int, flawed: bool) -> tuple[list[str], str]:
    width = max(len(str(a)), len(str(b)))
    steps, sums, carry = [], [], 0
    for da, db in zip(_digits(a, width), _digits(b, width), strict=True):
        total = da + db + carry
        steps.append(f"{da}+{db}+{carry}={total}")
        sums.append(total)
        carry = 0 if flawed else total // 10
    return steps, _from_columns(sums)


def _sub(a: int, b: int, flawed: bool) -> tuple[list[str], str]:
    width = len(str(a))
    steps, digits, borrow = [], [], 0
    for top, bottom in zip(_digits(a, width), _digits(b, width), strict=True):
        if flawed:
            # The classic bug: take the smaller digit from the larger instead of borrowing.
            top, bottom = max(top, bottom), min(top, bottom)
        elif top - bottom - borrow < 0:
            top += 10
        digit = top - bottom - borrow
        steps.append(f"{top}-{bottom}-{borrow}={digit}")
        digits.append(digit)
        borrow = int(top >= 10)
    return steps, str(int("".join(map(str, reversed(digits)))))


def _mul_digit(a: int, m: int, flawed: bool) -> tuple[list[str], str]:
    steps, products, carry = [], [], 0
    for da in _digits(a, len(str(a))):
        total = da * m + carry
        steps.append(f"{da}*{m}+{carry}={total}")
        products.append(total)
        carry = 0 if flawed else total // 10
    return steps, _from_columns(products)


def _mul(a: int, b: int, flawed: bool) -> tuple[list[str], str]:
    if b < 10:
        return _mul_digit(a, b, flawed)
    # Longer multipliers: one partial product per digit, then their sum.
    steps, total = [], 0
    for place, m in enumerate(_digits(b, len(str(b)))):
        partial = int(_mul_digit(a, m, flawed)[1]) * 10**place
        steps.append(f"{a}*{m * 10**place}={partial}")
        total += partial
    return steps, str(total)


def _mul_long(a: int, b: int, flawed: bool) -> tuple[list[str], str]:
    """Every partial product digit by digit, shifted to its place, then the column sums."""
    if b < 10:
        return _mul_digit(a, b, flawed)
    steps, partials = [], []
    for place, m in enumerate(_digits(b, len(str(b)))):
        digit_steps, partial = _mul_digit(a, m, flawed)
        partials.append(int(partial) * 10**place)
        steps.append(f"{a}*{m}: " + " ".join(digit_steps) + f" ={partials[-1]}")
    width = len(str(max(partials)))
    columns, carry = [], 0
    for column in zip(*(_digits(p, width) for p in partials), strict=True):
        total = sum(column) + carry
        steps.append("+".join(map(str, column)) + f"+{carry}={total}")
        columns.append(total)
        carry = 0 if flawed else total // 10
    return steps, _from_columns(columns)


SOLVERS = {"add": _add, "sub": _sub, "mul": _mul}


class ArithmeticTask(GeneratedTask):
    """Add, subtract or multiply integers; the demonstration works column by column."""

    name = "arithmetic"
    verifier = "numeric"
    Params = ArithmeticParams
    # The tiny model finds the column lookup after about 400 warm-start steps whatever the
    # batch, so 32 demonstrations a step give the base of 64 (3-digit add: greedy 0.34 / pass@4
    # 0.87 against 0.32 / 0.90) in half the time; 16 do not (0.16 / 0.23).
    pretrain_batch_size = 32

    def __init__(self, params: ArithmeticParams, seed: int, eval_size: int):
        self.params = params
        super().__init__(seed, eval_size)

    def _operand(self, rng: random.Random, digits: int) -> int:
        return rng.randint(10 ** (digits - 1), 10**digits - 1)

    def draw(self, rng: random.Random) -> Problem:
        op = rng.choice(self.params.operations)
        digits = self.params.digits
        if isinstance(digits, list):
            digits = rng.choice(digits)
        a = self._operand(rng, digits)
        b = self._operand(rng, self.params.mul_digits if op == "mul" else digits)
        if op == "sub" and a < b:
            a, b = b, a
        answer = {"add": a + b, "sub": a - b, "mul": a * b}[op]
        text = f"{a}{SYMBOLS[op]}{b}"
        metadata = {"op": op, "a": a, "b": b}
        # The worked solution rides along for solution_prefix's process credit.
        metadata["solution"] = self._solve(metadata, flawed=False)
        return Problem(
            id=f"arith-{text}",
            prompt=f"{text}=",
            answer=str(answer),
            domain="arithmetic",
            metadata=metadata,
        )

    def paraphrase(self, problem: Problem) -> Problem:
        meta = problem.metadata
        return reworded(problem, REWORDINGS[meta["op"]], a=meta["a"], b=meta["b"])

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        return self._solve(problem.metadata, flawed)

    def _solve(self, meta: dict, flawed: bool) -> str:
        long_mul = meta["op"] == "mul" and self.params.scratchpad == "long"
        solver = _mul_long if long_mul else SOLVERS[meta["op"]]
        steps, answer = solver(meta["a"], meta["b"], flawed)
        return " ".join(steps) + f" #### {answer}"
