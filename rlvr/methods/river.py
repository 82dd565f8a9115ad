"""River (arXiv 2608.22631): screen the task's train problems before RL, keeping those whose
verifier is consistent, that an LLM audit finds well posed and that an oracle can solve, and
take -delta off the advantages of each turn that repeats an earlier one. The screen plays each
problem in the task's own env, so single-turn tasks and multi-turn games are screened alike."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, field_validator

from rlvr.algos.filters import consistent_verifiers, solved_within
from rlvr.config import Config, ConfigError
from rlvr.envs.base import Env
from rlvr.models.loading import LoadSettings, load_model, resolve_device
from rlvr.registry import load_object, lookup
from rlvr.rewards.audit import DEFAULT_AUDIT_RUBRIC, EnvironmentAudit, check_rubric
from rlvr.rollout import ENGINES, HFEngine
from rlvr.rollout.build import env_factory, make_runner
from rlvr.rollout.runner import safe_step
from rlvr.tasks.base import EpochOrder, Task
from rlvr.train.components import Components
from rlvr.train.hooks import Method, MethodParams, Run, Step
from rlvr.types import Message, Problem, Score, Trajectory

FILTER_STREAM = 2  # sampling seeds apart from training's (0) and eval's (1)
# A judge without a usable verdict on more than this share of the pool is not auditing (a wrong
# rubric, too few new tokens, a model that cannot follow it): the run stops rather than guess.
UNUSABLE_LIMIT = 0.5

logger = logging.getLogger(__name__)

Policy = Callable[[list[Message]], str]  # the conversation so far -> the next reply


class AuditParams(LoadSettings):
    model: str = Field(
        "policy",
        description="The auditing judge: 'policy' (the run's starting policy, in the embedded "
        "engine), or a model path or hub id served by `engine`; an instruct model with a chat "
        "template.",
    )
    engine: str = Field(
        "hf",
        description="The engine that serves `model`: a rollout.engine name ('hf', 'vllm'), an "
        "entry point of group rlvr.engines or a 'module:attr' builder (cfg, model, tokenizer, "
        "model path). 'policy' audits in the embedded engine only.",
    )
    rubric: str = Field(
        DEFAULT_AUDIT_RUBRIC,
        description="The audit prompt, a format string with the fields {statement} (the "
        "problem's messages, hints included) and {reference} (its answer, or '(none given)'); it "
        "asks for a last line 'Verdict: yes' (well posed) or 'Verdict: no'.",
    )
    max_new_tokens: int = Field(
        256, gt=0, description="Longest judge reply; one cut before its verdict is unusable."
    )
    batch_size: int = Field(16, gt=0, description="Problems audited in one engine call.")
    on_unusable: Literal["keep", "drop"] = Field(
        "keep",
        description="A problem whose audit gave no usable verdict (no 'Verdict: yes/no' in the "
        "reply, or the engine failed) is kept (the judge's failure is no evidence against it) "
        "or dropped; the count is logged, and over half unusable stops the run.",
    )

    @field_validator("rubric")
    @classmethod
    def _known_fields(cls, rubric: str) -> str:
        return check_rubric(rubric)


class Params(MethodParams):
    filter: list[Literal["verifier_consistent", "llm_audit", "solvable"]] = Field(
        default_factory=lambda: ["verifier_consistent", "solvable"],
        description="Screen `pool` train problems before RL and train only on those kept: "
        "'verifier_consistent' (the verifier accepts the task's own demonstration and rejects an "
        "empty reply and another problem's answer; no model), 'llm_audit' (the `audit` judge "
        "says the problem is well posed), 'solvable' (`oracle` solves it within `k` tries); [] "
        "screens nothing. Eval problems are never filtered.",
    )
    audit: AuditParams = Field(
        default_factory=AuditParams, description="'llm_audit': the judge and how it is asked."
    )
    pool: int = Field(
        512, gt=0, description="How many train problems (the first ones) are screened."
    )
    oracle: str = Field(
        "policy",
        description="'solvable': who tries the problems: 'policy' (the run's starting policy), a "
        "model path or hub id, or a 'module:function' taking the conversation (messages) and "
        "returning the next reply.",
    )
    k: int = Field(4, gt=0, description="'solvable': tries the oracle gets per problem.")
    penalty_delta: float = Field(
        0.05,
        ge=0,
        description="Add -delta to the advantages of each turn whose action and observation both "
        "repeat an earlier turn's (Jaccard > `jaccard`); 0 turns the penalty off.",
    )
    jaccard: float = Field(
        0.8,
        ge=0,
        lt=1,
        description="Jaccard similarity of whitespace-separated words above which two turns' "
        "actions (and observations) count as the same.",
    )
    penalty_cap: float = Field(
        0.15, gt=0, description="Most repetition penalty in total per episode."
    )


class FilteredTask:
    """`task` whose train problems are the kept ones of its screened pool, in a fresh seeded
    order each epoch; everything else (eval problems, env, demonstrations) is `task`'s own."""

    def __init__(self, task: Task, kept: list[Problem], seed: int):
        self.task = task
        self.kept = EpochOrder(kept, seed)

    def train_problem(self, index: int) -> Problem:
        return self.kept[index]

    def __getattr__(self, name: str):
        task = self.__dict__.get("task")  # absent while copy or pickle rebuild the object
        if task is None:
            raise AttributeError(name)
        return getattr(task, name)


def play(env: Env, problem: Problem, policy: Policy, max_turns: int) -> bool:
    """Whether `policy` solves `problem` in `env` within max_turns (the env's `correct`)."""
    messages = env.reset(problem)
    for _ in range(max_turns):
        reply = policy(messages)
        result = safe_step(env, reply)
        if result.done:
            return bool(result.info.get("correct", False))
        observation = result.observation
        if observation is None or isinstance(observation, str):
            observation = {"role": "user", "content": observation or ""}
        added = observation if isinstance(observation, list) else [observation]
        messages = [*messages, {"role": "assistant", "content": reply}, *added]
    return False


def scripted(replies: list[str]) -> Policy:
    """A policy that says `replies` in order, whatever it is told, then nothing."""
    queue = iter(replies)
    return lambda messages: next(queue, "")


def demonstration_replies(task: Task, problem: Problem) -> list[str]:
    """The assistant replies of the task's (correct) demonstration of `problem`."""
    try:
        demo = task.demonstration(problem)
    except (NotImplementedError, ValueError, KeyError) as e:
        raise ConfigError(
            f"methods.river's 'verifier_consistent' plays each problem's demonstration, but task "
            f"'{task.name}' has none for {problem.id} ({e}); fix: drop it from methods.river.filter"
        ) from None
    if isinstance(demo, str):
        return [demo]
    return [m["content"] for m in demo if m["role"] == "assistant"]


def _wrong_answer(problems: list[Problem], demos: list[list[str]], i: int) -> list[str] | None:
    """The single-reply demonstration of the next problem after i (cyclically) whose answer
    differs from problem i's: a well-formed reply that must not pass i's verifier."""
    for step in range(1, len(problems)):
        j = (i + step) % len(problems)
        other, problem = problems[j], problems[i]
        if len(demos[j]) == 1 and (other.answer != problem.answer or problem.answer is None):
            return demos[j]
    return None


def verifier_consistent(
    cfg: Config, p: Params, components: Components, problems: list[Problem], model, tokenizer
) -> torch.Tensor:
    """Mask [N]: the env accepts the task's demonstration (the reference solution) and rejects
    an empty reply and, for single-reply tasks, another problem's demonstration. A multi-turn
    demonstration of another problem is no probe: replayed blind, it may still hit the answer."""
    task, make_env, turns = components.task, env_factory(components), cfg.rollout.max_turns
    demos = [demonstration_replies(task, p) for p in problems]
    reference, probes = [], []
    for i, problem in enumerate(problems):
        reference.append(play(make_env(), problem, scripted(demos[i]), turns))
        wrong = _wrong_answer(problems, demos, i) if len(demos[i]) == 1 else None
        probes.append(
            [
                play(make_env(), problem, scripted([]), turns),
                wrong is not None and play(make_env(), problem, scripted(wrong), turns),
            ]
        )
    return consistent_verifiers(torch.tensor(reference), torch.tensor(probes))


def oracle_successes(
    cfg: Config, p: Params, components: Components, problems: list[Problem], model, tokenizer
) -> torch.Tensor:
    """correct [N, k]: each of the oracle's k tries at each problem, sampled with the rollout
    settings (a model) or played turn by turn (a 'module:function' policy)."""
    oracle, k = p.oracle, p.k
    if ":" in oracle and not Path(oracle).exists():
        policy, make_env = load_object(oracle), env_factory(components)
        tries = [
            [play(make_env(), p, policy, cfg.rollout.max_turns) for _ in range(k)] for p in problems
        ]
        return torch.tensor(tries, dtype=torch.bool).reshape(len(problems), k)
    if oracle != "policy":
        model, tokenizer = load_model(
            oracle, cfg.model.dtype, cfg.model.trust_remote_code, key="methods.river.oracle"
        )
        model = model.to(resolve_device(cfg.model.device))
    runner = make_runner(cfg, model, tokenizer, components, trees=False)
    trajectories = runner.collect(problems, k, (cfg.train.seed, FILTER_STREAM, 0))
    return torch.tensor([t.correct for t in trajectories], dtype=torch.bool).reshape(-1, k)


def auditor(cfg: Config, a: AuditParams, model, tokenizer) -> EnvironmentAudit:
    """The audit judge of `a`: the starting policy (`model`) in the embedded engine, or a model
    path or hub id loaded on `a.device` and served by `a.engine`."""
    if a.model == "policy":
        return EnvironmentAudit(
            HFEngine(model, tokenizer, a.batch_size), tokenizer, a.rubric, a.max_new_tokens,
            a.batch_size,
        )  # fmt: skip
    model, tokenizer = load_model(
        a.model, a.dtype, a.trust_remote_code, key="methods.river.audit.model"
    )
    model = model.to(resolve_device(a.device)).eval()
    build = lookup(ENGINES, a.engine, "methods.river.audit.engine", group="rlvr.engines")
    engine = build(cfg, model, tokenizer, a.model)
    return EnvironmentAudit(engine, tokenizer, a.rubric, a.max_new_tokens, a.batch_size)


def audit_decisions(verdicts: list[Score], on_unusable: str) -> torch.Tensor:
    """Mask [N] of problems kept: a usable verdict keeps the well-posed ones (1.0); a problem
    without one is kept or dropped by `on_unusable`."""
    return torch.tensor(
        [v.value == 1.0 if v.status == "ok" else on_unusable == "keep" for v in verdicts],
        dtype=torch.bool,
    )


def llm_audit(
    cfg: Config, p: Params, components: Components, problems: list[Problem], model, tokenizer
) -> torch.Tensor:
    """Mask [N]: the audit judge finds the problem well posed (see audit_decisions); a judge
    without a usable verdict on over UNUSABLE_LIMIT of them stops the run."""
    verdicts = auditor(cfg, p.audit, model, tokenizer)(problems)
    unusable = [v for v in verdicts if v.status != "ok"]
    example = unusable[0].info if unusable else {}
    detail = f"{example.get('error')}; reply {example.get('judge_output', '')[:200]!r}"
    if len(unusable) > UNUSABLE_LIMIT * len(verdicts):
        raise ConfigError(
            f"methods.river.audit: the judge gave no usable verdict on {len(unusable)} of "
            f"{len(verdicts)} problems (e.g. {detail}); fix: a judge that can follow the rubric "
            "(methods.river.audit.model), a rubric asking for 'Verdict: yes' or 'Verdict: no', "
            "or a larger methods.river.audit.max_new_tokens"
        )
    if unusable:
        logger.warning(
            "methods.river.audit: no usable verdict on %d of %d problems, %s by "
            "methods.river.audit.on_unusable (e.g. %s)",
            len(unusable), len(verdicts),
            "kept" if p.audit.on_unusable == "keep" else "dropped", detail,
        )  # fmt: skip
    return audit_decisions(verdicts, p.audit.on_unusable)


def solvable(
    cfg: Config, p: Params, components: Components, problems: list[Problem], model, tokenizer
) -> torch.Tensor:
    """Mask [N]: the oracle solves the problem in at least one of its k tries."""
    return solved_within(oracle_successes(cfg, p, components, problems, model, tokenizer), p.k)


def screen_task(
    cfg: Config,
    p: Params,
    components: Components,
    model,
    tokenizer,
    say: Callable[[str], None] = print,
) -> FilteredTask:
    """The task with the first `p.pool` train problems that pass every filter of `p.filter`
    as its train set; each filter sees only what the ones before it kept, the cheap
    'verifier_consistent' (no sampling) first, then 'llm_audit' (one judge reply per problem). `model` is the starting policy."""
    pool = [components.task.train_problem(i) for i in range(p.pool)]
    kept = torch.ones(len(pool), dtype=torch.bool)
    dropped = {}
    for name in sorted(p.filter, key=list(PROBLEM_FILTERS).index):
        index = kept.nonzero().squeeze(1)
        if not len(index):
            break
        passed = PROBLEM_FILTERS[name](
            cfg, p, components, [pool[i] for i in index], model, tokenizer
        )
        kept[index[~passed]] = False
        dropped[name] = int((~passed).sum())
    summary = ", ".join(f"{n} dropped {d}" for n, d in dropped.items())
    if not kept.any():
        raise ConfigError(
            f"methods.river kept none of the pool={len(pool)} train problems it screened "
            f"({summary}); fix: check the task's verifier, raise methods.river.k, or choose a "
            "stronger methods.river.oracle"
        )
    say(
        f"methods.river: training on {int(kept.sum())} of {len(pool)} screened problems ({summary})"
    )
    return FilteredTask(
        components.task, [p for p, k in zip(pool, kept.tolist()) if k], cfg.train.seed
    )


# fn(cfg, params, components, problems, starting policy, tokenizer) -> mask [N] of problems kept,
# in the order they run (methods.river.filter names them)
ProblemFilter = Callable[[Config, Params, Components, list[Problem], object, object], torch.Tensor]
PROBLEM_FILTERS: dict[str, ProblemFilter] = {
    "verifier_consistent": verifier_consistent,
    "llm_audit": llm_audit,
    "solvable": solvable,
}


def jaccard(a: str, b: str) -> float:
    """|A & B| / |A | B| of the sets of whitespace-separated words of `a` and `b`; 1.0 for two
    texts without a word (both empty: the same, e.g. an empty command answered the same way)."""
    words_a, words_b = set(a.split()), set(b.split())
    union = words_a | words_b
    return len(words_a & words_b) / len(union) if union else 1.0


def turn_texts(trajectory: Trajectory, decode: Callable[[list[int]], str]) -> list[tuple[str, str]]:
    """(action, observation) text of each turn: what the policy generated in it, and what the env
    inserted after it up to the next reply ("" after the last turn). The observation includes
    the chat template's text between turns, which `decode` should drop (skip special tokens)."""
    ids, mask, ends = trajectory.token_ids, trajectory.loss_mask, trajectory.turn_ends
    texts, start = [], 0
    for turn, end in enumerate(ends):
        limit = ends[turn + 1] if turn + 1 < len(ends) else len(ids)
        stop = end  # the env's tokens run from this turn's end to the next policy token
        while stop < limit and not mask[stop]:
            stop += 1
        action = [t for t, m in zip(ids[start:end], mask[start:end]) if m]
        texts.append((decode(action), decode(ids[end:stop])))
        start = end
    return texts


def repeated_turns(turns: list[tuple[str, str]], threshold: float) -> list[bool]:
    """Which turns repeat an earlier one (River, arXiv:2608.22631): both the action and the
    observation have Jaccard similarity > threshold with those of one earlier turn, i.e. a
    command re-run with the same result. Similarity is over whitespace-separated words."""
    return [
        any(
            jaccard(action, earlier_action) > threshold
            and jaccard(observation, earlier_observation) > threshold
            for earlier_action, earlier_observation in turns[:k]
        )
        for k, (action, observation) in enumerate(turns)
    ]


def repetition_penalties(repeated: list[bool], delta: float, cap: float) -> list[float]:
    """Per-turn advantage offsets (<= 0): -delta on each repeated turn, in order, until the
    episode's total reaches -cap (River: delta 0.05, cap 0.15)."""
    offsets, total = [], 0.0
    for repeats in repeated:
        penalty = min(delta, cap - total) if repeats else 0.0
        total += penalty
        offsets.append(-penalty)
    return offsets


def turn_values_per_token(turn_values: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """[B, T]: each policy token gets its turn's value from turn_values [B, K]; 0 elsewhere
    (turn_ids [B, T] is -1 off the policy tokens)."""
    gathered = turn_values.gather(1, turn_ids.clamp(min=0))
    return torch.where(turn_ids >= 0, gathered, 0.0)


def repetition_offsets(
    trajectories: list[Trajectory],
    turn_ids: torch.Tensor,
    decode: Callable[[list[int]], str],
    threshold: float,
    delta: float,
    cap: float,
) -> tuple[torch.Tensor, float]:
    """River's advantage offsets [B, T] on every trajectory's policy tokens (`turn_ids` as
    Batch.turn_ids), and the share of the batch's turns that repeat an earlier one."""
    values = torch.zeros(len(trajectories), max(max(len(t.turn_ends) for t in trajectories), 1))
    repeated = turns = 0
    for row, trajectory in enumerate(trajectories):
        marks = repeated_turns(turn_texts(trajectory, decode), threshold)
        values[row, : len(marks)] = torch.tensor(repetition_penalties(marks, delta, cap))
        repeated, turns = repeated + sum(marks), turns + len(marks)
    return turn_values_per_token(values, turn_ids), repeated / max(turns, 1)


class River(Method):
    """River (arXiv 2608.22631): train on screened problems only, and penalise turns that
    repeat an earlier one."""

    Params = Params
    reads_labels = True  # the screen keeps the problems the verifier and an oracle agree on

    @classmethod
    def check(cls, params: Params, cfg: Config, task) -> None:
        a = params.audit
        if "llm_audit" in params.filter and a.model == "policy" and a.engine != "hf":
            raise ConfigError(
                f"methods.river.audit.model = 'policy' audits with the starting policy in the "
                f"embedded engine, not engine '{a.engine}'; fix: name the policy's path or hub id "
                "in methods.river.audit.model, or set methods.river.audit.engine = 'hf'"
            )

    def setup(self, run: Run) -> None:
        self.decode = partial(run.tokenizer.decode, skip_special_tokens=True)
        if self.params.filter:  # train only on screened problems (the warm start saw all)
            run.components.task = screen_task(
                run.cfg, self.params, run.components, run.model, run.tokenizer, run.say
            )

    def advantage_offsets(self, step: Step) -> torch.Tensor | None:
        p = self.params
        if not p.penalty_delta:
            return None
        offsets, repeated = repetition_offsets(
            step.trajectories, step.batch.turn_ids, self.decode, p.jaccard, p.penalty_delta,
            p.penalty_cap,
        )  # fmt: skip
        step.metrics["shaping/repeated_turns"] = repeated
        return offsets
