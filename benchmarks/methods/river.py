"""River (arXiv 2608.22631) at CPU scale: screening problems with broken verifiers, and the
turn-level repetition penalty.

(a) filter: the default arithmetic task, but 30% of the train problems have a broken verifier
    of their own: 15% always score 0, 15% reward the carry-free answer (the warm start's
    systematic shortcut) instead of the right one. Eval problems are all clean. Two arms from
    the default warm start, same seed and budget:
      all       train on every problem;
      filtered  methods.river.filter = [verifier_consistent, solvable] (the starting policy, 4 tries)
                over the first --pool train problems, as examples/recipes/river.toml.
    Reported: held-out greedy accuracy and pass@1 along the run, and which verifier kinds the
    screen kept.
(b) repetition: guess-the-number (1..16, 8 guesses, no per-turn reward) warm-started on
    demonstrations whose flawed share binary-searches but says every guess twice (a loop the
    env answers the same way both times). Two arms: the plain outcome reward, and
    methods.river.penalty_delta = 0.05 (cap 0.15, Jaccard 0.8). Reported: on the held-out
    secrets, the share of turns that repeat an earlier turn (the penalty's own detector) and
    of episodes with a repeat, before and after RL, sampled (temperature 1, --eval-k each) and
    greedy; success rate.

Prints one JSON object with every arm's numbers per seed, the CPU, date and versions.

    python benchmarks/methods/river.py [--part filter|repetition|both] [--seeds 0 1]
        [--steps 30] [--batch-size 64] [--pool 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from functools import partial

from machine import machine

from rlvr.algos.shaping import repeated_turns, turn_texts
from rlvr.config import load_config
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.methods.river import FilteredTask
from rlvr.rewards.match import numeric_match
from rlvr.tasks.arithmetic import SOLVERS, ArithmeticTask
from rlvr.tasks.base import seeded_rng
from rlvr.tasks.guess_number import GuessNumberTask
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.warmstart import ensure_warm_start
from rlvr.types import Message, Problem, Score

BROKEN = {"always_zero": 0.15, "shortcut": 0.15}  # the rest are clean


class BrokenVerifiers(ArithmeticTask):
    """arithmetic whose train problems each carry a verifier: clean, always 0, or one that
    rewards the carry-free (shortcut) answer instead of the right one; eval is all clean."""

    verifier = None  # the env scores, with each problem's own verifier

    def train_problem(self, index: int) -> Problem:
        problem = super().train_problem(index)
        draw, kind = seeded_rng(self.seed, "verifier", index).random(), "clean"
        for name, share in BROKEN.items():
            if draw < share:
                kind = name
                break
            draw -= share
        return replace(problem, metadata={**problem.metadata, "verifier": kind})

    def make_env(self, reward=None, verifier=None) -> SingleTurnEnv:
        return SingleTurnEnv(self.score, self.score)

    def score(self, problem: Problem, response: str) -> Score:
        kind = problem.metadata.get("verifier", "clean")
        if kind == "always_zero":
            return Score(0.0, "wrong")
        if kind == "shortcut":
            m = problem.metadata
            shortcut = SOLVERS[m["op"]](m["a"], m["b"], True)[1]
            return numeric_match(replace(problem, answer=shortcut), response)
        return numeric_match(problem, response)


class LoopyGuessNumber(GuessNumberTask):
    """guess_number whose flawed demonstrations binary-search but say every guess twice."""

    def demonstration(self, problem: Problem, flawed: bool = False) -> list[Message]:
        if not flawed:
            return super().demonstration(problem)
        looped: list[Message] = []
        for message in super().demonstration(problem):
            looped.append(message)
            if message["role"] == "user":  # the guess again, and the same answer again
                looped += [looped[-2], message]
        return looped[: 2 * self.params.max_guesses - 1]


def warm_start(overrides: list[str]) -> str:
    """The cached seed-0 warm start of the task in `overrides`, shared by every arm and seed."""
    cfg = load_config(None, overrides)
    return str(ensure_warm_start(cfg, build_components(cfg).task))


def common(args, run_dir: str, name: str, seed: int) -> list[str]:
    return [
        f"rollout.batch_size={args.batch_size}", f"train.steps={args.steps}",
        f"train.eval_every={args.eval_every}", f"train.seed={seed}", "train.save_every=0",
        f"log.run_dir={run_dir}", f"log.name={name}-{seed}", "log.quiet=true",
    ]  # fmt: skip


def evals(trainer: Trainer) -> dict:
    records = trainer.run_dir.read_metrics()
    return {
        key: {r["step"]: round(r[f"eval/{key}"], 3) for r in records if f"eval/{key}" in r}
        for key in ("accuracy", "pass@1")
    }


KINDS = ("clean", "always_zero", "shortcut", "shortcut_same_answer")


def kind_counts(problems: list[Problem]) -> dict[str, int]:
    """Problems per verifier kind; a shortcut verifier on a problem without carries rewards the
    right answer (the carry-free one is the same), so it counts apart, as harmless."""
    kinds = []
    for p in problems:
        kind, m = p.metadata["verifier"], p.metadata
        if kind == "shortcut" and SOLVERS[m["op"]](m["a"], m["b"], True)[1] == p.answer:
            kind = "shortcut_same_answer"
        kinds.append(kind)
    return {kind: kinds.count(kind) for kind in KINDS}


def run_filter_arm(name: str, args, run_dir: str, model: str, seed: int) -> dict:
    arms = {
        "all": [],
        "filtered": [
            "methods.river.filter=[verifier_consistent, solvable]", f"methods.river.pool={args.pool}",
            "methods.river.k=4", "methods.river.penalty_delta=0",
        ],
    }  # fmt: skip
    overrides = [
        f"model.name={model}", f"task.name={__name__}:BrokenVerifiers", "train.eval_k=4",
        f"task.eval_size={args.eval_size}",
        *common(args, run_dir, name, seed), *arms[name],
    ]  # fmt: skip
    start = time.perf_counter()
    trainer = Trainer(load_config(None, overrides))
    initialised = time.perf_counter() - start
    task = trainer.components.task
    screened_pool = [getattr(task, "task", task).train_problem(i) for i in range(args.pool)]
    summary = trainer.run()
    steps = [r for r in trainer.run_dir.read_metrics() if "reward" in r]
    return {
        "eval_by_step": evals(trainer),
        "final_accuracy": summary["final_eval"]["eval/accuracy"],
        "final_pass@1": summary["final_eval"]["eval/pass@1"],
        "pool_by_verifier_kind": kind_counts(screened_pool),
        "kept_by_verifier_kind": kind_counts(task.kept.items)
        if isinstance(task, FilteredTask)
        else None,
        "train_reward_first5": round(statistics.fmean(r["reward"] for r in steps[:5]), 3),
        "train_reward_last5": round(statistics.fmean(r["reward"] for r in steps[-5:]), 3),
        "init_seconds": round(initialised, 1),  # model load and, filtered, the screen
        "wall_seconds": round(time.perf_counter() - start, 1),
    }


def repetition_rates(trainer: Trainer, k: int) -> dict:
    """Repeated-turn share and episodes with a repeat, sampled and greedy, on the eval secrets."""
    source, problems = trainer.source.evaluator, trainer.eval_problems
    decode = partial(trainer.tokenizer.decode, skip_special_tokens=True)
    seed = (trainer.cfg.train.seed, 3, trainer.state["step"])  # a stream of its own
    out = {}
    for mode, params, count in (
        ("sampled", source.params, k),
        ("greedy", replace(source.params, temperature=0.0), 1),
    ):
        episodes = source.collect(problems, count, seed, params)
        marks = [repeated_turns(turn_texts(t, decode), 0.8) for t in episodes]
        out[mode] = {
            "repeated_turn_share": round(sum(map(sum, marks)) / sum(map(len, marks)), 4),
            "episodes_with_a_repeat": round(sum(any(m) for m in marks) / len(marks), 4),
            "turns_per_episode": round(sum(map(len, marks)) / len(marks), 3),
            "success": round(sum(t.correct for t in episodes) / len(episodes), 4),
        }
    return out


def run_repetition_arm(name: str, args, run_dir: str, model: str, seed: int) -> dict:
    arms = {"outcome": [], "penalty": ["methods.river.filter=[]"]}
    overrides = [
        f"model.name={model}", *LOOPY, "train.eval_k=1", *common(args, run_dir, name, seed),
        *arms[name],
    ]  # fmt: skip
    start = time.perf_counter()
    trainer = Trainer(load_config(None, overrides))
    before = repetition_rates(trainer, args.eval_k)
    summary = trainer.run()
    steps = [r for r in trainer.run_dir.read_metrics() if "reward" in r]
    logged = [r["shaping/repeated_turns"] for r in steps if "shaping/repeated_turns" in r]
    return {
        "before": before,
        "after": repetition_rates(trainer, args.eval_k),
        "eval_accuracy_base_final": [
            summary["base_eval"]["eval/accuracy"], summary["final_eval"]["eval/accuracy"]
        ],
        "train_repeated_turns_first5_last5": None if not logged else [
            round(statistics.fmean(logged[:5]), 4), round(statistics.fmean(logged[-5:]), 4)
        ],
        "wall_seconds": round(time.perf_counter() - start, 1),
    }  # fmt: skip


LOOPY = [
    f"task.name={__name__}:LoopyGuessNumber", "task.max_number=16", "task.max_guesses=8",
    "task.consistency_reward=0.0", "task.eval_size=32", "rollout.group_size=8",
    "rollout.max_new_tokens=24", "rollout.max_turns=8",
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["filter", "repetition", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-k", type=int, default=4, help="(b): samples per eval secret")
    parser.add_argument("--pool", type=int, default=256, help="(a): problems screened")
    parser.add_argument("--eval-size", type=int, default=100, help="(a): held-out problems")
    args = parser.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as run_dir:
        if args.part in ("filter", "both"):
            model = warm_start([])  # the default task's warm start (what `rlvr train` builds)
            results["filter"] = {
                arm: {seed: run_filter_arm(arm, args, run_dir, model, seed) for seed in args.seeds}
                for arm in ("all", "filtered")
            }
        if args.part in ("repetition", "both"):
            model = warm_start(LOOPY)
            results["repetition"] = {
                arm: {
                    seed: run_repetition_arm(arm, args, run_dir, model, seed) for seed in args.seeds
                }
                for arm in ("outcome", "penalty")
            }
    print(
        json.dumps(
            {
                "benchmark": "methods/river",
                "steps": args.steps,
                "batch_size": args.batch_size,
                "seeds": args.seeds,
                "pool": args.pool,
                "broken_shares": BROKEN,
                "results": results,
                **machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
