"""What RL changed in a model (`rlvr analyze`): pass@k up to large k (did RL sharpen what the
base could already sample, or find something new?), answer diversity, reply entropy, layer-wise
probes of correctness, the probability of the task's reference replies, and (ablate) how much
accuracy falls with each layer mean-ablated."""

from __future__ import annotations

from collections import defaultdict

from rlvr.analysis.entropy import reply_entropy
from rlvr.analysis.mechanism import layer_mechanism
from rlvr.analysis.passk import pass_at_k
from rlvr.analysis.probes import layer_probes
from rlvr.analysis.target_mass import reply_logprobs
from rlvr.rewards.peer import answer_reader
from rlvr.types import Problem, Trajectory

ANALYZE_STREAM = 6  # sampling seeds apart from training (0), eval (1), River (2), RGPO (3), debate


def pass_curve(correct: list[int], k: int) -> dict[str, float]:
    """Mean unbiased pass@j over problems for j = 1, 2, 4, ... up to k (and k itself), from each
    problem's count of correct samples out of k."""
    sizes = sorted({2**i for i in range(k.bit_length()) if 2**i <= k} | {k})
    return {f"pass@{j}": sum(pass_at_k(k, c, j) for c in correct) / len(correct) for j in sizes}


def diversity(trajectories: list[Trajectory], answer) -> dict[str, float]:
    """Per problem, the share of its samples that are distinct replies and distinct answers (as
    the verifier reads them; no answer counts as one more), averaged over problems."""
    replies, answers = defaultdict(list), defaultdict(list)
    for t in trajectories:
        replies[t.group_id].append(t.response_text)
        answers[t.group_id].append(answer(t.response_text))
    share = lambda groups: sum(len(set(g)) / len(g) for g in groups.values()) / len(groups)  # noqa: E731
    return {"diversity/replies": share(replies), "diversity/answers": share(answers)}


def reference_replies(task, problems: list[Problem]) -> list[str] | None:
    """The task's own correct reply to each problem (its demonstration), where it writes one as
    a single text; None for a task without (or with multi-turn ones)."""
    try:
        replies = [task.demonstration(p) for p in problems]
    except (AttributeError, NotImplementedError):
        return None
    return replies if all(isinstance(r, str) for r in replies) else None


def analyze_samples(
    model, tokenizer, runner, task, problems: list[Problem], k: int, cfg, ablate: bool = False
) -> dict:
    """k seeded samples of each problem at the run's sampling settings, measured; `ablate` adds
    each layer's mean-ablation drop in greedy accuracy and the depth slopes (layer_mechanism)."""
    sampled = runner.collect(problems, k, (cfg.train.seed, ANALYZE_STREAM, 0))
    correct: dict[int, int] = defaultdict(int)
    for t in sampled:
        correct[t.group_id] += t.correct
    counts = [correct[g] for g in range(len(problems))]
    out = {"problems": len(problems), "k": k, "correct_counts": counts}
    out.update(pass_curve(counts, k))
    out.update(diversity(sampled, answer_reader(task.verifier, cfg.task.reward_params)))
    out.update(reply_entropy(model, sampled, tokenizer.pad_token_id, cfg.rollout.temperature))
    if ablate:
        seed = (cfg.train.seed, ANALYZE_STREAM, 1)
        out.update(layer_mechanism(model, tokenizer, runner, problems, sampled, seed))
    else:
        out.update(layer_probes(model, sampled, tokenizer.pad_token_id))
    references = reference_replies(task, problems)
    if references is not None:
        logprobs = reply_logprobs(model, tokenizer, problems, references)
        out["reference/logprob"] = float(logprobs.mean())
        out["reference/prob"] = float(logprobs.exp().mean())
    return out
