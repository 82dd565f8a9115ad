"""Sums of independent products ("527*6+318*4="): Parason's test bed, whose demonstrations work
the products one after another or as parallel <Subtask> threads."""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from rlvr.tasks.arithmetic import _add, _mul_digit
from rlvr.tasks.base import GeneratedTask
from rlvr.tasks.thread_tags import TAG_TOKENS
from rlvr.types import Problem


class ProductSumParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    terms: int = Field(3, ge=2, le=6, description="Products in each sum.")
    digits: int = Field(3, ge=1, le=6, description="Digits of each product's first factor.")
    parallel_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of demonstrations that work the products as parallel <Subtask> "
        "threads; the rest work them one after another.",
    )


class ProductSumTask(GeneratedTask):
    """Sums of products of a multi-digit and a one-digit number, each one independent."""

    name = "product_sum"
    verifier = "numeric"
    Params = ProductSumParams
    # examples/parason.toml (benchmarks/methods/parason.py).
    recommended_tiny = {
        "model.pretrain_steps": 600,
        "rollout.batch_size": 64,
        "rollout.max_new_tokens": 144,
        "train.lr": 2e-5,
        "train.micro_batch_size": 32,
    }
    # The embedded tokenizer spells each tag as one token, as a real tokenizer spends a few on it.
    added_tokens = TAG_TOKENS

    def __init__(self, params: ProductSumParams, seed: int, eval_size: int):
        self.params = params
        super().__init__(seed, eval_size)

    def draw(self, rng: random.Random) -> Problem:
        low = 10 ** (self.params.digits - 1)
        factors = [
            (rng.randint(low, 10 * low - 1), rng.randint(2, 9)) for _ in range(self.params.terms)
        ]
        text = "+".join(f"{a}*{b}" for a, b in factors)
        return Problem(
            id=f"psum-{text}",
            prompt=f"{text}=",
            answer=str(sum(a * b for a, b in factors)),
            domain="arithmetic",
            metadata={"factors": factors},
        )

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        """Each product digit by digit, then the running sum column by column; `flawed` drops
        every carry. A parallel demonstration (drawn per problem and flaw, parallel_share of
        them) outlines the products as subtasks and works each in its own thread."""
        factors = [tuple(f) for f in problem.metadata["factors"]]
        products = [_mul_digit(a, b, flawed) for a, b in factors]
        total, sums = products[0][1], []
        for _, product in products[1:]:
            steps, new_total = _add(int(total), int(product), flawed)
            sums.append(f"{total}+{product}: " + " ".join(steps) + f" ={new_total}")
            total = new_total
        rng = random.Random(f"{problem.id}:{flawed}")
        if rng.random() < self.params.parallel_share:
            outlines = "".join(
                f"<Subtask>{k}: {a}*{b}</Subtask>" for k, (a, b) in enumerate(factors, 1)
            )
            threads = "".join(
                f"<Thread>{k}: " + " ".join(steps) + f" ={product}</Thread>"
                for k, (steps, product) in enumerate(products, 1)
            )
            work = f"<Parallel><Outlines>{outlines}</Outlines>{threads}</Parallel> "
        else:
            work = "".join(
                f"{a}*{b}: " + " ".join(steps) + f" ={product} "
                for (a, b), (steps, product) in zip(factors, products)
            )
        return work + " ".join(sums) + f" #### {total}"
