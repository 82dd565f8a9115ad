"""How hard each task setting is for its warm-started tiny model before any RL: greedy accuracy,
sampled pass@1 and pass@k on its held-out problems, scored by rlvr's eval.

The hard settings in examples/hard/ aim at a base that samples the answer 10-30% of the time
(pass@1) and finds it far more often in k tries (pass@k), so RL has both room and signal.
Each config's warm start is built on first use and cached, as `rlvr train` does; the time it
took is reported when it was built here. Prints one JSON object.

    python benchmarks/difficulty.py [CONFIG ...] [--k 16] [section.key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "methods"))
from machine import machine  # noqa: E402

HARD = sorted(str(p) for p in (Path(__file__).parents[1] / "examples" / "hard").glob("*.toml"))
BAND = (0.10, 0.30)


def measure(path: str, k: int, overrides: list[str]) -> dict:
    from rlvr.config import load_config
    from rlvr.rollout.build import make_runner
    from rlvr.train.components import build_components
    from rlvr.train.display import Display
    from rlvr.train.evaluate import evaluate
    from rlvr.train.trainer import load_policy
    from rlvr.train.warmstart import warm_start_path

    cfg = load_config(path, [*overrides, "log.quiet=true"])
    components = build_components(cfg)
    cached = (Path(warm_start_path(cfg, components.task)) / "COMPLETE").is_file()
    start = time.perf_counter()
    model, tokenizer = load_policy(cfg, components, Display(True))
    warm_seconds = None if cached else round(time.perf_counter() - start, 1)
    runner = make_runner(cfg, model.eval(), tokenizer, components)
    problems = components.task.eval_problems()
    metrics = evaluate(runner, problems, k, cfg.train.seed)
    pass1 = metrics["eval/pass@1"]
    return {
        "config": path,
        "overrides": overrides,
        "problems": len(problems),
        "greedy": metrics["eval/accuracy"],
        "pass@1": round(pass1, 4),
        f"pass@{k}": round(metrics[f"eval/pass@{k}"], 4),
        "response_length": round(metrics["eval/response_length"], 1),
        "in_band": BAND[0] <= pass1 <= BAND[1],
        "warm_start_seconds": warm_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", help="TOML configs (default: examples/hard/)")
    parser.add_argument("--k", type=int, default=16, help="samples per problem for pass@k")
    args, overrides = parser.parse_known_args()
    configs = [c for c in args.configs if "=" not in c] or HARD
    overrides += [c for c in args.configs if "=" in c]
    results = []
    for path in configs:
        results.append(measure(path, args.k, overrides))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # kept if cut short
    print(json.dumps({"benchmark": "difficulty", **machine(), "k": args.k, "band": BAND,
                      "results": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
