"""POISE (arXiv 2605.07579) against RLOO at two samples per prompt, on additions whose success
rate differs from prompt to prompt (1 to 4 digits a problem), so the probe has something to read.

Both arms start from this task's seed-0 warm start and use examples/recipes/poise.toml's
settings (rollout.group_size=2, PPO clipped loss); they differ only in algo.advantage: rloo
(the other sample's reward as the baseline), or poise (the mean probe prediction of the other
sample, rloo during the first --bootstrap steps).

Prints one JSON object: per arm and seed, held-out greedy accuracy and pass@1 before and after,
and the advantage variance of poise vs rloo on the same batches once the probe is on; for poise
the probe's skill on each batch before it is refitted on it (poise/skill, poise/pearson), and
the final probe's skill on held-out eval prompts (--probe-prompts of them, --probe-samples
replies each from the final policy, each reply's prediction against its siblings' mean reward),
with its mean prediction and the mean reward per digit count; with the CPU, date and versions.

    python benchmarks/methods/poise.py [--steps 20] [--bootstrap 4] [--eval-every 10]
        [--seeds 0 1 2] [--batch-size 128] [--lr 1e-5] [--buffer 512] [--ridge-alpha 100]
        [--arms poise rloo]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from rlvr.algos.advantages import sibling_mean
from rlvr.methods.poise import LayerFeatures, probe_metrics
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.tokens import encode_prompt
from rlvr.train.update import batch_logprobs
from rlvr.types import Batch, Trajectory

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "poise.toml"
TASK = ["task.digits=[1,2,3,4]", "task.eval_size=100"]
ARMS = {"rloo": ["algo.advantage=rloo", "methods.poise=null"], "poise": []}


def sampled(trainer, problems, k: int) -> list[Trajectory]:
    """k scored replies per problem from the trainer's policy, as the rollout samples them."""
    tokenizer, cfg = trainer.tokenizer, trainer.cfg
    prompts = [encode_prompt(tokenizer, p.messages()) for p in problems for _ in range(k)]
    replies = HFEngine(trainer.model, tokenizer).generate(
        prompts,
        SamplingParams(cfg.rollout.max_new_tokens, cfg.rollout.temperature),
        seeds=list(range(len(prompts))),
    )
    out = []
    for i, (prompt, reply) in enumerate(zip(prompts, replies)):
        problem, ids = problems[i // k], prompt + reply.token_ids
        reward = trainer.components.verifier(problem, reply.text).value
        out.append(Trajectory(
            problem, group_id=i // k, sample_index=i % k, token_ids=ids,
            loss_mask=[0] * len(prompt) + [1] * len(reply.token_ids),
            behaviour_logprobs=[0.0] * len(ids), turn_rewards=[reward], turn_ends=[len(ids)],
        ))  # fmt: skip
    return out


def held_out_probe(trainer, prompts: int, k: int) -> dict:
    """The final probe on eval prompts: each reply's prediction against the mean reward of its
    k - 1 siblings (a less noisy target than training's one sibling); and per digit count the
    mean prediction beside the mean reward."""
    method = trainer.methods.chosen["poise"]
    problems = trainer.eval_problems[:prompts]
    trajectories = sampled(trainer, problems, k)
    batch = Batch.from_trajectories(trajectories, trainer.tokenizer.pad_token_id)
    features = LayerFeatures(trainer.model, method.params.layer, len(batch))
    batch_logprobs(trainer.model, batch, 64, trainer.cfg.rollout.temperature, observers=[features])
    predictions = method.probe.predict(features.values, [t.problem.domain for t in trajectories])
    rewards = torch.tensor([t.turn_rewards[0] for t in trajectories], dtype=torch.float64)
    groups = torch.tensor([t.group_id for t in trajectories])
    metrics = probe_metrics(predictions, sibling_mean(rewards, groups))
    digits = torch.tensor([len(str(t.problem.metadata["a"])) for t in trajectories])
    by_digits = {
        int(d): {
            "mean_prediction": round(float(predictions[digits == d].mean()), 4),
            "mean_reward": round(float(rewards[digits == d].mean()), 4),
        }
        for d in digits.unique()
    }
    return {
        **{key.split("/")[1]: round(value, 4) for key, value in metrics.items()},
        "rollouts": len(trajectories),
        "by_digits": by_digits,
    }


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}", *TASK,
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
        f"methods.poise.bootstrap_steps={args.bootstrap}", f"methods.poise.buffer={args.buffer}",
        f"methods.poise.ridge_alpha={args.ridge_alpha}",
        f"rollout.batch_size={args.batch_size}", f"train.lr={args.lr}",
        *ARMS[name],  # last: rloo drops methods.poise, settings included
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    probed = [r for r in arm.records if r.get("poise/fitted") == 1.0]  # after the bootstrap

    def mean(key: str) -> float | None:
        values = [r[key] for r in probed if key in r]
        return round(statistics.fmean(values), 4) if values else None

    out = {
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "base_accuracy": arm.summary["base_eval"]["eval/accuracy"],
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "base_pass@1": arm.summary["base_eval"]["eval/pass@1"],
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
        "mean_reward": arm.mean("reward"),
        "wall_seconds": arm.wall_seconds,
    }
    if name == "rloo":
        # 0/1 rewards in pairs: rloo's advantage is +-1 in a mixed pair and 0 in a uniform one,
        # so its (unbiased) variance is n / (n - 1) times the share of mixed pairs; the steps
        # are those on which the poise arm's probe is on
        n, later = args.batch_size, [r for r in arm.records if r.get("step", 0) > args.bootstrap]
        shares = [1 - r["uniform_groups"] for r in later if "uniform_groups" in r]
        out["mean_adv_var"] = round(statistics.fmean(shares) * n / (n - 1), 4)
    if name == "poise":
        out.update(
            probe_steps=len(probed), next_batch_skill=mean("poise/skill"),
            next_batch_pearson=mean("poise/pearson"), mean_adv_var=mean("poise/adv_var"),
            mean_rloo_adv_var=mean("poise/rloo_adv_var"),
            held_out_probe=held_out_probe(arm.trainer, args.probe_prompts, args.probe_samples),
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bootstrap", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch-size", type=int, default=128, help="rollouts per step")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--buffer", type=int, default=512, help="probe rows (4 steps' worth)")
    parser.add_argument(
        "--ridge-alpha", type=float, default=100.0, help="the paper's 100 is for 4096 rows"
    )
    parser.add_argument("--probe-prompts", type=int, default=100, help="held-out probe prompts")
    parser.add_argument("--probe-samples", type=int, default=8, help="replies per probe prompt")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    args = parser.parse_args()
    model = warm_start(RECIPE, TASK)
    arms = run_all(
        args.arms, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report(
        "poise",
        RECIPE,
        arms,
        task="arithmetic add, 1-4 digits a problem (task.digits=[1,2,3,4])",
        steps=args.steps,
        bootstrap_steps=args.bootstrap,
        batch_size=args.batch_size,
        buffer=args.buffer,
        ridge_alpha=args.ridge_alpha,
        lr=args.lr,
    )


if __name__ == "__main__":
    main()
