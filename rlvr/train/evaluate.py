"""Held-out evaluation: greedy accuracy, and pass@1 / pass@k from k seeded samples per problem;
for parallel-thread traces, the critical path."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from rlvr.analysis.passk import pass_at_k
from rlvr.rollout.parallel import counter_for, trace_stats
from rlvr.rollout.runner import EpisodeRunner
from rlvr.train.metrics import domain_metrics
from rlvr.types import Problem

# Keeps eval sampling seeds apart from training's (stream 0). Every eval draws the seeds of step 0,
# so a curve's change is the model's, not the draw's (an unchanged model scores the same pass@k at
# every step), and models from different runs or steps are compared on the same random numbers.
EVAL_STREAM = 1


def held_out(task, eval_size: int, display) -> list[Problem]:
    """The task's held-out problems, with a note where a small file holds out fewer than
    task.eval_size (eval's accuracy then moves in coarse steps)."""
    problems = task.eval_problems()
    if len(problems) < eval_size:
        display.message(
            f"[yellow]task.eval_size = {eval_size}, but the task holds out only {len(problems)} "
            f"problems; eval scores those, so its accuracy moves in steps of 1/{len(problems)}"
        )
    return problems


def compared(base: dict[str, float], final: dict[str, float]) -> list[tuple[str, str, str]]:
    """(metric, base, final) rows of the run's summary table: every eval metric both hold."""
    return [
        (k.removeprefix("eval/"), f"{base[k]:.3f}", f"{final[k]:.3f}")
        for k in final
        if k in base and not k.startswith("time/")
    ]


def evaluate(runner: EpisodeRunner, problems: list[Problem], k: int, seed: int) -> dict[str, float]:
    greedy = runner.collect(
        problems, 1, (seed, EVAL_STREAM, 0), replace(runner.params, temperature=0.0)
    )
    metrics = {
        "eval/accuracy": sum(t.correct for t in greedy) / len(greedy),
        "eval/reward": sum(t.reward for t in greedy) / len(greedy),
        "eval/response_length": sum(t.num_generated for t in greedy) / len(greedy),
    }
    metrics.update(domain_metrics(greedy, "eval/"))
    solved = [len(t.turn_rewards) for t in greedy if t.correct]
    if any(len(t.turn_rewards) > 1 for t in greedy):  # multi-turn: how fast it gets there
        metrics["eval/turns"] = sum(len(t.turn_rewards) for t in greedy) / len(greedy)
        metrics["eval/turns_per_solved"] = sum(solved) / len(solved) if solved else 0.0
    if any("<Parallel>" in t.response_text for t in greedy):  # Parason: threads side by side
        texts = [t.response_text for t in greedy]
        traces = [trace_stats(text, counter_for(runner.tokenizer, text)) for text in texts]
        n = len(traces)
        metrics["eval/critical_path_tokens"] = sum(s.critical_path_tokens for s in traces) / n
        metrics["eval/parallel_share"] = sum(s.regions > 0 for s in traces) / n
    if k > 1:
        sampled = runner.collect(problems, k, (seed, EVAL_STREAM, 0))
        correct: dict[int, int] = defaultdict(int)
        domain: dict[int, str] = {}
        for t in sampled:
            correct[t.group_id] += t.correct
            domain[t.group_id] = t.problem.domain
        metrics.update(_pass_rates(correct, k, "eval/"))
        if len(set(domain.values())) > 1:
            for name in sorted(set(domain.values())):
                mine = {g: c for g, c in correct.items() if domain[g] == name}
                metrics.update(_pass_rates(mine, k, f"eval/domain/{name}/"))
    return metrics


def difficulty(base: dict[str, float], k: int) -> str | None:
    """What a run should be told before RL when its base model's eval leaves it little to learn
    from: it solves no held-out problem in k samples (every group then scores alike, so no
    sample gets a non-zero advantage), or it already solves nearly every one, greedy and
    sampled. None when neither holds."""
    solved_any = base[f"eval/pass@{k}"] if k > 1 else base["eval/accuracy"]
    tries = f"in {k} samples" if k > 1 else "greedily"
    if solved_any == 0:
        return (
            f"the base model solves none of the held-out problems {tries}, so RL's groups will "
            "have no correct sample to favour and learn nothing. Fix: a stronger or longer-"
            "warmed model (model.name, model.pretrain_steps), easier task settings, or a "
            "partial-credit reward in task.rewards"
        )
    if base["eval/accuracy"] >= 0.98 and (k == 1 or base["eval/pass@1"] >= 0.95):
        return (
            f"the base model already solves {base['eval/accuracy']:.0%} of the held-out problems "
            "greedily, so RL has little left to improve. Fix: harder task settings, or a task "
            "the model cannot yet do"
        )
    return None


def _pass_rates(correct: dict[int, int], k: int, prefix: str) -> dict[str, float]:
    """Mean pass@1 and pass@k over problems, from each one's count of correct samples out of k."""
    return {
        f"{prefix}pass@1": sum(pass_at_k(k, c, 1) for c in correct.values()) / len(correct),
        f"{prefix}pass@{k}": sum(pass_at_k(k, c, k) for c in correct.values()) / len(correct),
    }
