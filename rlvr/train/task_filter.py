"""Screening a task's train problems before RL (River, task.filter): the problems whose verifier
is consistent and that an oracle can solve become the train set; the screening plays each
problem in the task's own env, so single-turn tasks and multi-turn games are screened alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from rlvr.algos.filters import consistent_verifiers, solved_within
from rlvr.config import Config, ConfigError
from rlvr.envs.base import Env
from rlvr.models.loading import load_model, resolve_device
from rlvr.registry import load_object
from rlvr.rollout.runner import safe_step
from rlvr.tasks.base import EpochOrder, Task
from rlvr.train.setup import Components, env_factory, make_runner
from rlvr.types import Message, Problem

FILTER_STREAM = 2  # sampling seeds apart from training's (0) and eval's (1)

Policy = Callable[[list[Message]], str]  # the conversation so far -> the next reply


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
            f"task.filter 'verifier_consistent' plays each problem's demonstration, but task "
            f"'{task.name}' has none for {problem.id} ({e}); fix: drop it from task.filter"
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
    cfg: Config, components: Components, problems: list[Problem], model, tokenizer
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
    cfg: Config, components: Components, problems: list[Problem], model, tokenizer
) -> torch.Tensor:
    """correct [N, task.filter_k]: each try of task.filter_oracle at each problem, sampled with
    the rollout settings (a model) or played turn by turn (a 'module:function' policy)."""
    oracle, k = cfg.task.filter_oracle, cfg.task.filter_k
    if ":" in oracle and not Path(oracle).exists():
        policy, make_env = load_object(oracle), env_factory(components)
        tries = [
            [play(make_env(), p, policy, cfg.rollout.max_turns) for _ in range(k)] for p in problems
        ]
        return torch.tensor(tries, dtype=torch.bool).reshape(len(problems), k)
    if oracle != "policy":
        model, tokenizer = load_model(
            oracle, cfg.model.dtype, cfg.model.trust_remote_code, key="task.filter_oracle"
        )
        model = model.to(resolve_device(cfg.model.device))
    runner = make_runner(cfg, model, tokenizer, components, trees=False)
    trajectories = runner.collect(problems, k, (cfg.train.seed, FILTER_STREAM, 0))
    return torch.tensor([t.correct for t in trajectories], dtype=torch.bool).reshape(-1, k)


def solvable(
    cfg: Config, components: Components, problems: list[Problem], model, tokenizer
) -> torch.Tensor:
    """Mask [N]: task.filter_oracle solves the problem in at least one of task.filter_k tries."""
    return solved_within(
        oracle_successes(cfg, components, problems, model, tokenizer), cfg.task.filter_k
    )


def screen_task(
    cfg: Config, components: Components, model, tokenizer, say: Callable[[str], None] = print
) -> FilteredTask:
    """The task with the first task.filter_pool train problems that pass every filter of
    task.filter as its train set; each filter sees only what the ones before it kept, the
    cheap 'verifier_consistent' (no sampling) first. `model` is the starting policy."""
    pool = [components.task.train_problem(i) for i in range(cfg.task.filter_pool)]
    kept = torch.ones(len(pool), dtype=torch.bool)
    dropped = {}
    for name in sorted(cfg.task.filter, key=list(PROBLEM_FILTERS).index):
        index = kept.nonzero().squeeze(1)
        if not len(index):
            break
        passed = PROBLEM_FILTERS[name](cfg, components, [pool[i] for i in index], model, tokenizer)
        kept[index[~passed]] = False
        dropped[name] = int((~passed).sum())
    summary = ", ".join(f"{n} dropped {d}" for n, d in dropped.items())
    if not kept.any():
        raise ConfigError(
            f"task.filter kept none of the task.filter_pool={len(pool)} train problems ({summary}); "
            "fix: check the task's verifier, raise task.filter_k, or choose a stronger "
            "task.filter_oracle"
        )
    say(f"task.filter: training on {int(kept.sum())} of {len(pool)} screened problems ({summary})")
    return FilteredTask(
        components.task, [p for p, k in zip(pool, kept.tolist()) if k], cfg.train.seed
    )


# fn(cfg, components, problems, starting policy, tokenizer) -> mask [N] of problems kept; in the
# order they run (task.filter names them)
ProblemFilter = Callable[[Config, Components, list[Problem], object, object], torch.Tensor]
PROBLEM_FILTERS: dict[str, ProblemFilter] = {
    "verifier_consistent": verifier_consistent,
    "solvable": solvable,
}
