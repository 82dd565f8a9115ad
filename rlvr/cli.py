"""The `rlvr` command: train, eval, pretrain, profile, merge, list, serve."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlvr import serve
from rlvr.catalog import KINDS
from rlvr.config import ConfigError, load_config

EXAMPLES = """examples:
  rlvr train                                   # tiny model, GRPO on 3-digit addition (the default)
  rlvr train examples/arithmetic.toml algo.kl_coef=0.02 train.steps=50
  rlvr train model.name=Qwen/Qwen2.5-0.5B-Instruct task.name=countdown
  rlvr train --resume runs/arithmetic-20261130-101500
  rlvr eval runs/arithmetic-20261130-101500/final --task arithmetic
  rlvr pretrain --task countdown               # build the warm-started tiny model only
  rlvr merge --method ties --base BASE --models runs/math/final runs/code/final --out merged
  rlvr list rewards
"""


def _config(path: str | None, overrides: list[str], quiet: bool):
    # a first positional that contains '=' is an override, not a file
    if path and "=" in path:
        overrides, path = [path, *overrides], None
    from rlvr.train.recommend import apply_recommended

    cfg = load_config(path, overrides)
    if quiet:
        cfg.log.quiet = True
    return apply_recommended(cfg)


def cmd_train(args) -> None:
    from rlvr.api import runner
    from rlvr.train.faults import TrainingInterrupted
    from rlvr.train.rundir import RunDir, RunDirError

    try:
        if args.resume:
            run = RunDir(Path(args.resume))
            overrides = ([args.config] if args.config else []) + args.overrides
            cfg = load_config(None, overrides, base=run.load_config().model_dump(mode="json"))
            if args.quiet:
                cfg.log.quiet = True
            if run.finished(cfg.train.steps):  # said before loading a model it has no use for
                print(run.finished_note(), file=sys.stderr)
                return
            runner(cfg)(cfg, resume=run.path).run()
        else:
            cfg = _config(args.config, args.overrides, args.quiet)
            runner(cfg)(cfg).run()
    except RunDirError as e:
        print(f"rlvr: {e}", file=sys.stderr)
        sys.exit(1)
    except TrainingInterrupted as e:
        print(f"rlvr: {e}", file=sys.stderr)
        sys.exit(130)  # the shell's code for a Ctrl-C
    except KeyboardInterrupt:
        print("rlvr: interrupted before training began", file=sys.stderr)
        sys.exit(130)


def cmd_pretrain(args) -> None:
    from rlvr.train.components import build_components
    from rlvr.train.display import Display
    from rlvr.train.policy import load_policy
    from rlvr.train.warmstart import warm_start_path

    cfg = _config(args.config, [f"task.name={args.task}", *args.overrides], args.quiet)
    components = build_components(cfg)
    load_policy(cfg, components, Display(cfg.log.quiet))
    print(warm_start_path(cfg, components.task))


def cmd_eval(args) -> None:
    from rlvr.api import evaluate, run_of

    run = run_of(Path(args.model))
    if run is not None:
        print(f"rlvr eval: {run.final} with the config of {run.path}", file=sys.stderr)
    metrics = evaluate(args.model, *args.overrides, task=args.task, config=args.config)
    print(json.dumps(metrics, indent=2))


def cmd_analyze(args) -> None:
    from rlvr.api import analyze

    models = [t for t in args.targets if "=" not in t]
    overrides = [t for t in args.targets if "=" in t] + args.overrides  # those after options
    results = {
        m: analyze(m, *overrides, task=args.task, config=args.config, k=args.k,
                   problems=args.problems, ablate=args.ablate)
        for m in models
    }  # fmt: skip
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for name, found in results.items():
            curve = {int(k[5:]): v for k, v in found.items() if k.startswith("pass@")}
            ax.plot(list(curve), list(curve.values()), marker="o", label=name)
        ax.set(xscale="log", xlabel="k", ylabel="pass@k", ylim=(0, 1.02))
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
    print(json.dumps(results, indent=2))


def cmd_report(args) -> None:
    from rlvr.analysis.page import run_page

    run = Path(args.run)
    if not (run / "metrics.jsonl").is_file():
        print(f"rlvr report: {run} is not a run directory (no metrics.jsonl)", file=sys.stderr)
        sys.exit(2)
    out = Path(args.out) if args.out else run / "report.html"
    out.write_text(run_page(run))
    print(out)


def cmd_compare(args) -> None:
    from rlvr.analysis.page import compare_page

    missing = [r for r in args.runs if not (Path(r) / "metrics.jsonl").is_file()]
    if missing:
        print(f"rlvr compare: not run directories (no metrics.jsonl): {missing}", file=sys.stderr)
        sys.exit(2)
    Path(args.out).write_text(compare_page([Path(r) for r in args.runs]))
    print(args.out)


def cmd_profile(args) -> None:
    from rlvr.train.profile import cost_model, mean_metrics, phase_table, step_total
    from rlvr.train.trainer import Trainer

    cfg = _config(args.config, args.overrides, True)
    cfg.train.save_every = 0
    trainer = Trainer(cfg)
    steps = []
    try:
        for _ in range(args.steps + 1):  # the first step warms up caches and threads
            start = time.perf_counter()
            metrics = trainer.step()
            metrics["time/step"] = time.perf_counter() - start
            trainer.state["step"] += 1
            steps.append(metrics)
    finally:
        trainer.updater.close()
        trainer.source.close()
    steps = steps[1:]
    print(f"{args.steps} steps of {cfg.rollout.batch_size} samples after one warm-up step; "
          f"peak {trainer.peak}")  # fmt: skip
    print(f"{'phase':<17}{'s/step':>9}{'share':>8}{'GFLOP':>10}{'utilisation':>13}")
    for phase, seconds, share, flops, used in phase_table(steps):
        print(f"{phase:<17}{seconds:>9.3f}{share:>8.1%}{flops / 1e9:>10.2f}{used:>13.1%}")
    step = mean_metrics(steps)
    print(f"{'step':<17}{step['time/step']:>9.3f}")
    print(f"padding in training passes {step['padding/train']:.1%}; "
          f"{step['tokens/generated']:.0f} tokens generated, {step['tokens/trained']:.0f} trained, "
          f"{step['tokens/shared_prompt']:.0f} of them skipped as shared prompts")  # fmt: skip
    print("cost model (FLOPs per step at this batch):")
    algo = cfg.algo
    layouts = cost_model(step, algo.ppo_epochs, algo.critic_updates)
    for name, flops in layouts:
        print(f"  {name:<26}{flops / 1e9:>9.2f} GFLOP  {flops / layouts[0][1]:.2f}x GRPO")
    measured = step_total(step)
    print(f"  {'this config (measured)':<26}{measured / 1e9:>9.2f} GFLOP  "
          f"{measured / layouts[0][1]:.2f}x GRPO")  # fmt: skip


def cmd_merge(args) -> None:
    from rlvr.models.merging import MERGES, MergeSettings, merge_checkpoints
    from rlvr.registry import lookup

    lookup(MERGES, args.method, "rlvr merge --method")  # a typo fails before any model loads
    weights = args.weights or [1.0] * len(args.models)
    if len(weights) != len(args.models):
        raise ConfigError(
            f"--weights has {len(weights)} values for {len(args.models)} --models; give one per "
            "model, or none (1 each)"
        )
    if args.density is not None and not 0 < args.density <= 1:
        raise ConfigError(f"--density {args.density} is the share of each task vector kept; "
                          "give a value in (0, 1]")  # fmt: skip
    if Path(args.out).exists() and any(Path(args.out).iterdir()):
        raise ConfigError(f"--out {args.out} is not empty; choose a new directory")
    settings = MergeSettings(tuple(weights), args.scale, args.density, args.seed)
    print(merge_checkpoints(args.base, args.models, args.method, settings, Path(args.out)))


def cmd_list(args) -> None:
    from rlvr.catalog import rows

    for kind in [args.kind] if args.kind else list(KINDS):
        print(f"{kind}:")
        found = rows(kind)
        width = max((len(name) for name, _ in found), default=0)
        for name, doc in found:
            print(f"  {name:<{width}}  {doc}")


def add_merge(sub) -> None:
    """`rlvr merge`: models fine-tuned from one base, merged into one."""
    mg = sub.add_parser("merge", help="merge models fine-tuned from one base into one HF model")
    mg.add_argument("--method", required=True,
                    help="average | task_arithmetic | ties | dare_ties | dare_linear | tsv")  # fmt: skip
    mg.add_argument("--base", required=True, help="the model every one of --models started from")
    mg.add_argument(
        "--models", nargs="+", required=True, help="model or peft adapter directories to merge"
    )
    mg.add_argument("--out", required=True, help="directory to write the merged model to")
    mg.add_argument("--weights", type=float, nargs="+", help="one per model (default 1 each)")
    mg.add_argument("--scale", type=float, default=1.0, help="lambda on the merged task vector")
    mg.add_argument("--density", type=float,
                    help="share of each task vector kept (ties 0.2, dare_* 0.8)")  # fmt: skip
    mg.add_argument("--seed", type=int, default=0, help="DARE's random drops")
    mg.set_defaults(func=cmd_merge)


def add_analyze(sub) -> None:
    """`rlvr analyze`: pass@k, diversity, entropy, layer probes and (--ablate) layer ablations
    of models on a task's held-out problems."""
    an = sub.add_parser(
        "analyze",
        help="pass@k up to large k, diversity, entropy, layer probes (and ablations) and "
        "reference-reply probability of models",
    )
    an.add_argument(
        "targets", nargs="+", help="models (run directories, or model directories with --task), "
        "then section.key=value overrides",
    )  # fmt: skip
    an.add_argument("--task", help="task name (a run directory brings its own)")
    an.add_argument("--config", help="TOML/YAML config file for task and sampling settings")
    an.add_argument("--k", type=int, default=64, help="samples per problem (default 64)")
    an.add_argument("--problems", type=int, default=50, help="held-out problems (default 50)")
    an.add_argument("--plot", help="also write the pass@k curves to this PNG")
    an.add_argument(
        "--ablate", action="store_true", help="also mean-ablate each decoder layer in turn: the "
        "drop in greedy accuracy per layer (RL against SFT, arXiv 2607.26119)",
    )  # fmt: skip
    an.set_defaults(func=cmd_analyze, overrides=[])


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="rlvr",
        description="Post-train language models with RL from verifiable rewards.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = root.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("config", nargs="?", help="TOML/YAML config file (optional)")
        p.add_argument(
            "overrides", nargs="*", help="section.key=value overrides, e.g. train.steps=50"
        )
        p.add_argument("--quiet", action="store_true", help="log lines instead of a progress bar")
        return p

    train = with_config(
        sub.add_parser("train", help="run RL training (default: tiny model, arithmetic)")
    )
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue runs/<name> from its newest checkpoint"
    )
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="held-out greedy accuracy and pass@k of a model on a task")
    ev.add_argument(
        "model",
        help="a run directory (runs/<name> or runs/<name>/final: its own config and seeds, so "
        "the numbers match its final eval), or a model directory or hub id with --task",
    )
    ev.add_argument("overrides", nargs="*", help="section.key=value overrides, e.g. task.digits=4")
    ev.add_argument("--task", help="task name (a run directory brings its own)")
    ev.add_argument("--config", help="TOML/YAML config file for task, rollout and eval settings")
    ev.set_defaults(func=cmd_eval)

    pre = with_config(
        sub.add_parser("pretrain", help="warm-start the tiny model on a task's demonstrations")
    )
    pre.add_argument("--task", required=True, help="task name")
    pre.set_defaults(func=cmd_pretrain)

    prof = with_config(
        sub.add_parser("profile", help="time and count the FLOPs of each phase of a few steps")
    )
    prof.add_argument("--steps", type=int, default=5, help="steps to measure (default 5)")
    prof.set_defaults(func=cmd_profile)

    add_merge(sub)

    ls = sub.add_parser("list", help="show the registries")
    ls.add_argument("kind", nargs="?", choices=KINDS)
    ls.set_defaults(func=cmd_list, light=True)

    add_analyze(sub)
    serve.add_parser(sub)

    rep = sub.add_parser(
        "report", help="a run's page: curves, evals, config and samples, one HTML file"
    )
    rep.add_argument("run", help="run directory (runs/<name>)")
    rep.add_argument("--out", help="where to write it (default: RUN/report.html)")
    rep.set_defaults(func=cmd_report, light=True)

    cmp = sub.add_parser("compare", help="several runs' curves overlaid, one HTML file")
    cmp.add_argument("runs", nargs="+", help="run directories")
    cmp.add_argument("--out", default="compare.html", help="where to write it")
    cmp.set_defaults(func=cmd_compare, light=True)
    return root


def main(argv: list[str] | None = None) -> None:
    root = parser()
    # overrides may follow options (`rlvr eval M --task T task.digits=2`), which argparse
    # leaves unparsed; anything else unknown is still an error
    args, extra = root.parse_known_args(argv)
    unknown = [a for a in extra if "=" not in a or a.startswith("-")]
    if unknown or (extra and not hasattr(args, "overrides")):
        root.error(f"unrecognized arguments: {' '.join(unknown or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    if getattr(args, "light", False):  # `rlvr list` reads a cache and needs no torch
        args.func(args)
        return
    # imported only now, so `rlvr --help` and a usage error never wait for torch
    from transformers.utils import logging as hf_logging

    from rlvr.models.loading import ModelNotFoundError

    hf_logging.disable_progress_bar()  # rlvr shows its own; per-shard bars are noise
    try:
        args.func(args)
    except (ConfigError, ModelNotFoundError) as e:
        print(f"rlvr: {e}", file=sys.stderr)
        sys.exit(2)
