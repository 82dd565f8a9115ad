"""rlvr against Hugging Face TRL's GRPOTrainer on the same run, each in its own process, in turn.

Both start from rlvr's warm-started tiny model of the default task (saved once as a Hugging
Face model directory), train on the same arithmetic prompts (rendered by the model's chat
template), score with the same reward function (rlvr's default: numeric answer plus format
bonus, as a TRL reward function) and share the shape: P prompts x G samples a step, up to T new
tokens, temperature (rollout.temperature, default 1), lr 1e-4 constant, no KL, one epoch, no
gradient checkpointing, grad norm clipped at 1. Every K steps each side's model is scored by
rlvr's own eval (greedy accuracy on the same 200 held-out problems; rlvr evaluates in the run,
TRL's checkpoints are evaluated after its run), outside the timed steps. Prints one JSON
object: per framework and round, median seconds per step (after the first), generated tokens
per step, peak RSS, eval accuracy by step, training seconds to the target accuracy, and the
ratios rlvr / TRL.

TRL is a benchmark extra, never a runtime dependency: pip install -c constraints.txt -e '.[bench]'

    python benchmarks/vs_trl.py [--shape default|long] [--steps 20] [--rounds 2]
                                [--eval-every 2] [--target 0.9] [section.key=value ...]

`--shape long` is the long-answer shape: a 15 M-parameter tiny model (preset medium), briefly
warm-started on 4 x 3-digit multiplication with the long scratchpad (about 230 tokens a
reply), 4 prompts x 8 samples, up to 320 new tokens. Its short warm start teaches the format,
not the arithmetic, so no accuracy target is reached there: it measures the cost of a step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

# TRL's side reads the same settings from the resolved config (lr, schedule, KL coefficient)
COMMON = ["train.lr=1e-4", "train.lr_schedule=constant", "train.eval_k=1"]
SHAPES = {
    "default": [],
    "long": [
        "model.preset=medium", "model.pretrain_steps=60", "model.pretrain_batch_size=16",
        "model.pretrain_lr=1e-3", 'task.operations=["mul"]', "task.digits=4", "task.mul_digits=3",
        "task.scratchpad=long", "task.eval_size=32", "rollout.batch_size=32",
        "rollout.group_size=8", "rollout.max_new_tokens=320", "train.micro_batch_size=8",
    ],
}  # fmt: skip


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def shared_setup(overrides: list[str]):
    from rlvr.config import load_config
    from rlvr.train.components import build_components
    from rlvr.train.display import Display
    from rlvr.train.policy import load_policy

    cfg = load_config(None, [*overrides, "log.quiet=true"])
    components = build_components(cfg)
    return cfg, components, Display(True), load_policy


def final_eval(model_dir: str, overrides: list[str]) -> dict[str, float]:
    """rlvr's held-out eval of a saved model: greedy accuracy, and pass@k at train.eval_k."""
    from rlvr.models.loading import load_model
    from rlvr.rollout.build import make_runner
    from rlvr.train.evaluate import evaluate

    cfg, components, _, _ = shared_setup(overrides)
    model, tokenizer = load_model(model_dir, "float32", False)
    runner = make_runner(cfg, model.eval(), tokenizer, components)
    return evaluate(runner, components.task.eval_problems(), cfg.train.eval_k, cfg.train.seed)


def run_rlvr(model_dir: str, out_dir: str, steps: int, every: int, overrides: list[str]) -> dict:
    from rlvr.config import load_config
    from rlvr.train.trainer import Trainer

    cfg = load_config(None, [
        *overrides, f"model.name={model_dir}", f"train.steps={steps}", f"train.eval_every={every}",
        "train.save_every=0", f"log.run_dir={out_dir}", "log.name=rlvr", "log.quiet=true",
    ])  # fmt: skip
    trainer = Trainer(cfg)
    trainer.run()
    metrics = trainer.run_dir.read_metrics()
    records = [r for r in metrics if "time/step" in r]
    evals = {r["step"]: r for r in metrics if "eval/accuracy" in r}
    return {
        "step_seconds": [r["time/step"] for r in records],
        "generated_tokens": [r["tokens/generated"] for r in records],
        "accuracy_by_step": {step: r["eval/accuracy"] for step, r in evals.items()},
        "eval_by_step": {
            step: {k: v for k, v in r.items() if k.startswith("eval/")} for step, r in evals.items()
        },
    }


def run_trl(model_dir: str, out_dir: str, steps: int, every: int, overrides: list[str]) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    cfg, components, _, _ = shared_setup(overrides)
    r, task = cfg.rollout, components.task
    prompts_per_step = r.batch_size // r.group_size
    problems = {}
    rows = []
    for i in range(steps * prompts_per_step):
        problem = task.train_problem(i)
        problems[problem.id] = problem
        rows.append({"prompt": problem.messages(), "problem_id": problem.id})

    def reward(prompts, completions, problem_id, **_) -> list[float]:
        return [
            float(components.reward(problems[pid], completion[-1]["content"]).value)
            for pid, completion in zip(problem_id, completions)
        ]

    timings: list[float] = []
    generated: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            timings.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                generated.append(logs["completions/mean_length"] * r.batch_size)

    args = GRPOConfig(
        output_dir=out_dir, num_generations=r.group_size, per_device_train_batch_size=r.batch_size,
        max_completion_length=r.max_new_tokens, temperature=r.temperature, top_k=0, top_p=1.0,
        learning_rate=cfg.train.lr, lr_scheduler_type=cfg.train.lr_schedule,
        beta=cfg.algo.kl_coef, num_iterations=1,
        gradient_checkpointing=False, use_cpu=not torch.cuda.is_available(), max_steps=steps, logging_steps=1,
        save_strategy="steps", save_steps=every, save_only_model=True, report_to="none",
        max_grad_norm=cfg.train.max_grad_norm,
        seed=cfg.train.seed, bf16=False,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, callbacks=[StepTimer()],
    )  # fmt: skip
    trainer.train()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before rlvr's evals
    evals = {0: final_eval(model_dir, overrides)}
    for checkpoint in sorted(Path(out_dir).glob("checkpoint-*"), key=lambda p: int(p.name[11:])):
        tokenizer.save_pretrained(checkpoint)
        evals[int(checkpoint.name[11:])] = final_eval(str(checkpoint), overrides)
    accuracy = {step: e["eval/accuracy"] for step, e in evals.items()}
    return {"step_seconds": timings, "generated_tokens": generated, "accuracy_by_step": accuracy,
            "eval_by_step": evals, "peak_rss_mib": peak}  # fmt: skip


def child(framework: str, model_dir: str, out_dir: str, steps: int, every: int,
          overrides: list[str]) -> None:  # fmt: skip
    """One framework's run in this process, so its peak RSS is its own."""
    torch.manual_seed(0)
    run = run_rlvr if framework == "rlvr" else run_trl
    result = run(model_dir, out_dir, steps, every, overrides)
    result.setdefault("peak_rss_mib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if torch.cuda.is_available():
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(result))


def run_child(framework: str, model_dir: str, out_dir: str, steps: int, every: int,
              overrides: list[str]) -> dict:  # fmt: skip
    """`child` in a process of its own; its result, or exit with the end of its stderr."""
    command = [sys.executable, __file__, "--steps", str(steps), "--eval-every", str(every),
               "--child", framework, model_dir, out_dir, *overrides]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{framework} run {out_dir} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def summary(run: dict, target: float) -> dict:
    seconds = statistics.median(run["step_seconds"][1:])
    tokens = statistics.fmean(run["generated_tokens"][1:]) if run["generated_tokens"] else 0.0
    accuracy = {int(step): acc for step, acc in run["accuracy_by_step"].items()}
    reached = next((s for s in sorted(accuracy) if s and accuracy[s] >= target), None)
    return {
        "seconds_per_step_median": round(seconds, 3),
        "generated_tokens_per_step": round(tokens, 1),
        "accuracy_by_step": accuracy,
        "final_accuracy": accuracy[max(accuracy)],
        "step_reaching_target": reached,
        "train_seconds_to_target": None
        if reached is None
        else round(sum(run["step_seconds"][:reached]), 2),
        "peak_rss_mib": round(run["peak_rss_mib"], 1),
        **({"peak_gpu_mib": round(run["peak_gpu_mib"], 1)} if "peak_gpu_mib" in run else {}),
        "steps": len(run["step_seconds"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="default")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2, help="rlvr then TRL, this many times")
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--child", nargs=3, metavar=("FRAMEWORK", "MODEL_DIR", "OUT_DIR"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.child:
        return child(*args.child, args.steps, args.eval_every, args.overrides)
    overrides = COMMON + SHAPES[args.shape] + args.overrides
    cfg, components, display, load_policy = shared_setup(overrides)
    results: dict[str, list[dict]] = {"rlvr": [], "trl": []}
    with tempfile.TemporaryDirectory() as work:
        model, tokenizer = load_policy(cfg, components, display)  # the warm start, cached
        model.save_pretrained(f"{work}/model")
        tokenizer.save_pretrained(f"{work}/model")
        for round_ in range(args.rounds):
            for framework in results:
                out = f"{work}/{framework}-{round_}"
                run = run_child(framework, f"{work}/model", out, args.steps, args.eval_every,
                                overrides)  # fmt: skip
                results[framework].append(summary(run, args.target))
    import trl

    median = {
        name: statistics.median(r["seconds_per_step_median"] for r in runs)
        for name, runs in results.items()
    }
    print(json.dumps({
        "benchmark": "vs_trl", "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "trl": trl.__version__, "steps": args.steps, "target": args.target,
        "shape_name": args.shape, "overrides": overrides,
        "shape": {"prompts": cfg.rollout.batch_size // cfg.rollout.group_size,
                  "group_size": cfg.rollout.group_size, "max_new_tokens": cfg.rollout.max_new_tokens},
        "rounds": results,
        "step_time_rlvr_over_trl": round(median["rlvr"] / median["trl"], 3),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
