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

(c) audit: what the deterministic check (verifier_consistent) and the LLM audit (llm_audit) each
    remove from held-out planted environments (rlvr.tasks.planted: good ones beside a wrong
    reference, an impossible task, a leaking hint and a lenient verifier). The auditor is the
    tiny model (no hub model offline): the default arithmetic warm start, then the warm-start
    machinery (supervised_train) on --audit-steps batches of worked audits of planted
    environments of train operand pairs (PlantedAudits); it is measured on the environments
    of the held-out pairs, through methods.river's own judge path (model directory, 'hf'
    engine, TINY_RUBRIC, greedy). The untrained tiny model is audited alike, as the control.
    Per seed the planted sets, held-out pairs and fine-tuning order differ.

Prints one JSON object with every arm's numbers per seed, the CPU, date and versions.

    python benchmarks/methods/river.py [--part filter|repetition|audit|all] [--seeds 0 1 2]
        [--steps 30] [--batch-size 64] [--pool 256] [--audit-steps 400] [--held-out 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from functools import partial

import torch
from machine import machine

from rlvr.config import load_config
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.methods.river import (
    FilteredTask,
    Params,
    audit_decisions,
    auditor,
    repeated_turns,
    turn_texts,
    verifier_consistent,
)
from rlvr.models.loading import load_model
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.rewards.match import numeric_match
from rlvr.tasks.arithmetic import SOLVERS, ArithmeticTask
from rlvr.tasks.base import seeded_rng
from rlvr.tasks.guess_number import GuessNumberTask
from rlvr.tasks.planted import KINDS as PLANTED_KINDS
from rlvr.tasks.planted import PlantedAudits
from rlvr.train.components import Components, build_components, build_task
from rlvr.train.trainer import Trainer
from rlvr.train.warmstart import ensure_warm_start, supervised_train
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


# The tiny model has 512 positions: the statement first, as the arithmetic warm start saw it,
# and no instructions (the warm-started auditor learns the reply's form from its demonstrations).
TINY_RUBRIC = "{statement}\nreference {reference}"


def audit_task(args, seed: int) -> PlantedAudits:
    """Worked audits of planted environments; its eval environments are the held-out pairs."""
    cfg = load_config(None, audit_overrides(args, seed))
    return build_task(cfg)


def audit_overrides(args, seed: int) -> list[str]:
    return [
        "task.name=rlvr.tasks.planted:PlantedAudits", f"task.rubric={json.dumps(TINY_RUBRIC)}",
        f"task.digits={args.digits}", f"task.eval_size={args.held_out}", f"train.seed={seed}",
        f"model.pretrain_steps={args.audit_steps}", f"model.pretrain_batch_size={args.audit_batch}",
        f"model.pretrain_lr={args.audit_lr}", "model.pretrain_flawed_share=0",
    ]  # fmt: skip


def train_auditor(args, seed: int, base: str, out: str) -> dict:
    """The arithmetic warm start, fine-tuned on worked audits by the warm-start machinery."""
    cfg = load_config(None, audit_overrides(args, seed))
    model, tokenizer = load_model(base, "float32", False)
    torch.manual_seed(seed)
    start = time.perf_counter()
    trained = supervised_train(model, tokenizer, build_task(cfg), cfg)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"loss": round(trained["loss"], 4), "seconds": round(time.perf_counter() - start, 1)}


def untrained(out: str, seed: int) -> str:
    tokenizer = build_tokenizer()
    build_model("nano", tokenizer, seed=seed).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def removal_table(environments: list[Problem], removed: dict[str, list[bool]]) -> dict:
    """Per planted kind: how many there are, and how many each filter removed."""
    table = {}
    for kind in PLANTED_KINDS:
        rows = [i for i, e in enumerate(environments) if e.metadata["planted"] == kind]
        table[kind] = {"n": len(rows)} | {
            name: sum(marks[i] for i in rows) for name, marks in removed.items()
        }
    return table


def run_audit_seed(args, seed: int, base: str, run_dir: str) -> dict:
    task = audit_task(args, seed)
    environments = task.environments.eval_problems()  # pairs the auditor never trained on
    cfg = load_config(None, [f"train.seed={seed}"])
    screen = Components(task.environments, None, None, None, None, None)
    start = time.perf_counter()
    kept = verifier_consistent(cfg, Params(), screen, environments, None, None)
    check_seconds = time.perf_counter() - start
    models = {"tiny_auditor": f"{run_dir}/auditor-{seed}", "untrained": f"{run_dir}/raw-{seed}"}
    training = train_auditor(args, seed, base, models["tiny_auditor"])
    untrained(models["untrained"], seed)
    removed, unusable, seconds, examples = {"verifier_check": (~kept).tolist()}, {}, {}, {}
    for name, path in models.items():
        audit = {"model": path, "rubric": TINY_RUBRIC, "max_new_tokens": args.audit_tokens}
        start = time.perf_counter()
        verdicts = auditor(cfg, Params(audit=audit).audit, None, None)(environments)
        seconds[name] = round(time.perf_counter() - start, 1)
        removed[f"llm_audit:{name}"] = (~audit_decisions(verdicts, "keep")).tolist()
        unusable[name] = sum(v.status != "ok" for v in verdicts)
        replies = {e.metadata["planted"]: (e, v) for e, v in zip(environments, verdicts)}
        examples[name] = {
            kind: [e.prompt, e.answer, v.info.get("judge_output")]
            for kind, (e, v) in replies.items()
        }
    check, audited = removed["verifier_check"], removed["llm_audit:tiny_auditor"]
    removed["both:tiny_auditor"] = [a or b for a, b in zip(check, audited)]
    return {
        "removed_by_kind": removal_table(environments, removed),
        "unusable_verdicts": unusable,  # kept (on_unusable = keep)
        "example_replies": examples,  # per kind: statement, reference, the judge's reply
        "auditor_training": training,
        "seconds": {"verifier_check": round(check_seconds, 2), **seconds},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["filter", "repetition", "audit", "all"], default="all")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-k", type=int, default=4, help="(b): samples per eval secret")
    parser.add_argument("--pool", type=int, default=256, help="(a): problems screened")
    parser.add_argument("--eval-size", type=int, default=100, help="(a): held-out problems")
    parser.add_argument("--digits", type=int, default=3, help="(c): digits of each operand")
    parser.add_argument("--held-out", type=int, default=200, help="(c): held-out environments")
    parser.add_argument("--audit-steps", type=int, default=400, help="(c): auditor warm start")
    parser.add_argument("--audit-batch", type=int, default=32)
    parser.add_argument("--audit-lr", type=float, default=1e-3)
    parser.add_argument("--audit-tokens", type=int, default=100, help="(c): longest verdict")
    args = parser.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as run_dir:
        if args.part in ("filter", "all"):
            model = warm_start([])  # the default task's warm start (what `rlvr train` builds)
            results["filter"] = {
                arm: {seed: run_filter_arm(arm, args, run_dir, model, seed) for seed in args.seeds}
                for arm in ("all", "filtered")
            }
        if args.part in ("repetition", "all"):
            model = warm_start(LOOPY)
            results["repetition"] = {
                arm: {
                    seed: run_repetition_arm(arm, args, run_dir, model, seed) for seed in args.seeds
                }
                for arm in ("outcome", "penalty")
            }
        if args.part in ("audit", "all"):
            base = warm_start([])  # the default arithmetic warm start: an adder to start from
            results["audit"] = {
                seed: run_audit_seed(args, seed, base, run_dir) for seed in args.seeds
            }
    print(
        json.dumps(
            {
                "benchmark": "methods/river",
                "args": vars(args),
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
