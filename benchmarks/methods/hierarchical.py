"""Hierarchical rewards with the paper's KL-regularised actor-critic (Nishikawa & Suzuki,
methods.hierarchical): on nested levels (examples/nested_levels.toml: 4 levels of 2 bits, level i
visible only once levels < i are solved), how the policy's expected reward grows with the number
of reward queries when the replies are sampled on-policy, against sampling them from the fixed
reference (the paper: a polynomial rate against a logarithmic one).

Arms (same warm start, seed, config, method and queries per step):
  on_policy   each step samples from the current policy (the method's step 1)
  reference   each step samples from a frozen copy of the starting policy (pi_ref): the critic
              fits those replies and the policy takes the same projection step on them (the
              target's weights divide by the sampler's probability, so no other correction)

At each budget (steps x rollout.batch_size queries) the policy is scored exactly, with no
sampling noise: every well-formed reply of every key (4^levels strings) is scored by its
probability under the policy, giving the expected reward E_pi[f], the expected levels solved in
order, P(all levels), and the mass on well-formed replies (the rest scores as 0 here, a lower
bound). Also the training replies that solved every level, so far (what the critic has seen).

Prints one JSON object: per arm, seed and budget, those numbers; the mean over seeds; wall
seconds; CPU, date, versions.

    python benchmarks/methods/hierarchical.py [--budgets 0 5 10 20 40] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from machine import machine

from rlvr.config import load_config
from rlvr.rollout import HFEngine
from rlvr.rollout.build import make_runner
from rlvr.train.trainer import Trainer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nested_levels.toml"
ARMS = ("on_policy", "reference")
# the last step's: the training replies' reward, the critic's error on them, the target's
# effective share of each group, and the policy's log-ratio to pi_ref on them
LOGGED = (
    "reward", "hierarchical/score_error", "hierarchical/target_share",
    "hierarchical/logprob_minus_ref",
)  # fmt: skip


def well_formed(levels: int, bits: int) -> list[str]:
    """Every reply in the task's format: `levels` space-separated blocks of `bits` bits."""
    blocks = ["".join(b) for b in itertools.product("01", repeat=bits)]
    return [" ".join(r) for r in itertools.product(blocks, repeat=levels)]


def depth(reply: str, target: str) -> int:
    """Levels solved in order."""
    solved = 0
    for got, want in zip(reply.split(), target.split()):
        if got != want:
            break
        solved += 1
    return solved


class ExactEval:
    """The policy's distribution over every well-formed reply of every key, scored exactly."""

    def __init__(self, trainer: Trainer):
        task, tok = trainer.components.task, trainer.tokenizer
        p = task.params
        self.replies = well_formed(p.levels, p.bits_per_level)
        weights = list(task.weights.values())
        self.temperature = trainer.cfg.rollout.temperature
        problems = [task._problem(f"exact-{k}", k) for k in range(p.keys)]
        # one sampled reply per key gives the prompt's tokens as the runner lays them out
        sampled = trainer.source.evaluator.collect(problems, 1, (0, 9, 2))
        self.rows, self.depths, self.rewards = [], [], []
        for key, trajectory in enumerate(sorted(sampled, key=lambda t: t.problem.id)):
            start = trajectory.loss_mask.index(1)
            prompt = trajectory.token_ids[:start]
            ids = [prompt + tok.encode(r, add_special_tokens=False) + [tok.eos_token_id]
                   for r in self.replies]  # fmt: skip
            self.rows.append((torch.tensor(ids), start))
            d = torch.tensor([depth(r, task.targets[key]) for r in self.replies])
            self.depths.append(d)
            cumulative = torch.tensor([0.0, *itertools.accumulate(weights)])
            self.rewards.append(cumulative[d])

    @torch.no_grad()
    def __call__(self, model) -> dict:
        model.eval()
        out = {"expected_reward": [], "expected_levels": [], "p_all_levels": [], "mass": []}
        for (ids, start), depths, rewards in zip(self.rows, self.depths, self.rewards):
            logits = model(input_ids=ids).logits[:, start - 1 : -1].float() / self.temperature
            logp = logits.log_softmax(-1).gather(-1, ids[:, start:, None]).squeeze(-1).sum(-1)
            probs = logp.exp()
            out["expected_reward"].append(float((probs * rewards).sum()))
            out["expected_levels"].append(float((probs * depths).sum()))
            out["p_all_levels"].append(float(probs[depths == depths.max()].sum()))
            out["mass"].append(float(probs.sum()))
        model.train()
        return {k: round(statistics.fmean(v), 4) for k, v in out.items()}


def sample_from_reference(trainer: Trainer) -> None:
    """Training replies come from a frozen copy of the starting policy; eval reads the policy."""
    reference = copy.deepcopy(trainer.model).eval().requires_grad_(False)
    engine = HFEngine(reference, trainer.tokenizer, trainer.cfg.rollout.max_batch_size)
    trainer.source.runner = make_runner(
        trainer.cfg, reference, trainer.tokenizer, trainer.components, engine=engine
    )


def run_arm(arm: str, seed: int, budgets: list[int], run_dir: str, extra: list[str]) -> dict:
    overrides = [*extra,
        f"train.seed={seed}", f"train.steps={max(budgets)}", "train.eval_every=0",
        "train.save_every=0", f"log.run_dir={run_dir}", f"log.name={arm}-{seed}",
        "log.quiet=true", "log.report=false",
    ]  # fmt: skip
    trainer = Trainer(load_config(EXAMPLE, overrides))
    if arm == "reference":
        sample_from_reference(trainer)
    exact = ExactEval(trainer)
    targets = trainer.components.task.targets
    solved, collect = [0], trainer.source.collect

    def counting(problems, group_size, seed_parts):
        trajectories = collect(problems, group_size, seed_parts)
        key = lambda t: int(t.problem.prompt.split(":")[0].split()[1])  # noqa: E731
        solved[0] += sum(t.response_text.split() == targets[key(t)].split() for t in trajectories)
        return trajectories

    trainer.source.collect = counting
    per_budget, start, last = {}, time.perf_counter(), {}
    queries = trainer.cfg.rollout.batch_size
    try:
        while True:
            steps = trainer.state["step"]
            if steps in budgets:
                per_budget[str(steps * queries)] = dict(
                    exact(trainer.model),
                    solved_queries=solved[0],
                    **{key: round(last[key], 4) for key in LOGGED if key in last},
                )
            if steps == max(budgets):
                break
            last = trainer.step()
            trainer.state["step"] += 1
    finally:
        trainer.close()
    return {"by_queries": per_budget, "wall_seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[0, 5, 10, 20, 40],
                        help="steps after which the policy is scored")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--set", nargs="*", default=[], help="dotted overrides of the example")
    args = parser.parse_args()
    start = time.perf_counter()
    runs: dict[str, dict[str, dict]] = {arm: {} for arm in args.arms}
    with tempfile.TemporaryDirectory() as run_dir:
        for seed in args.seeds:
            for arm in args.arms:
                budgets = sorted(args.budgets)
                runs[arm][str(seed)] = run_arm(arm, seed, budgets, run_dir, args.set)
                print(json.dumps({arm: {seed: runs[arm][str(seed)]}}), flush=True)
    mean = {
        arm: {
            budget: {
                key: round(
                    statistics.fmean(r["by_queries"][budget][key] for r in by_seed.values()), 4
                )
                for key in ("expected_reward", "expected_levels", "p_all_levels")
            }
            for budget in next(iter(by_seed.values()))["by_queries"]
        }
        for arm, by_seed in runs.items()
    }
    cfg = load_config(EXAMPLE, args.set)
    print(
        json.dumps(
            {
                "benchmark": "methods/hierarchical",
                "config": "examples/nested_levels.toml",
                "overrides": args.set,
                "queries_per_step": cfg.rollout.batch_size,
                "beta": cfg.methods["hierarchical"]["beta"],
                "mean_over_seeds": mean,
                "arms": runs,
                "wall_seconds": round(time.perf_counter() - start, 1),
                **machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
