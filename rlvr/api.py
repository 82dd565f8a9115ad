"""The Python API, for notebooks and scripts: train, evaluate and load a run as the CLI does.
Heavy imports wait until a function is called, so `import rlvr` stays quick."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config import Config, ConfigError, load_config


def _config(config: str | Path | dict | Config | None, overrides: tuple[str, ...]) -> Config:
    """The run's config with the recommended settings where it leaves a key unset."""
    from rlvr.train.recommend import apply_recommended

    if isinstance(config, Config):  # what it leaves unset stays unset, so recommendations apply
        config = config.model_dump(mode="json", exclude_unset=True)
    if isinstance(config, dict):
        return apply_recommended(load_config(None, list(overrides), base=copy.deepcopy(config)))
    return apply_recommended(load_config(config, list(overrides)))


def runner(cfg: Config):
    """What trains this config: the runner of several policies it asks for (a cohort, a debate,
    RSPO's pair: rlvr/methods/runners.py's RUNNERS), or one Trainer."""
    from rlvr.methods.runners import choose_runner

    return choose_runner(cfg)


def run(config: str | Path | dict | Config | None = None, *overrides: str) -> dict:
    """Train as `rlvr train` does and return the run's summary: `config` is a TOML/YAML file, a
    dict or Config (None: the default run), `overrides` dotted `section.key=value` strings.
    (Not `rlvr.train`: that name is the package of the training loop.)

        summary = rlvr.run("examples/arithmetic.toml", "train.steps=50")
    """
    cfg = _config(config, overrides)
    return runner(cfg)(cfg).run()


def run_of(path: Path):
    """The run directory a path names (the run itself, or its final/), or None."""
    from rlvr.train.rundir import RunDir

    for candidate in (path, path.parent):
        if (candidate / "config.yaml").is_file() and (candidate / "final").is_dir():
            if candidate == path or path.name == "final":
                return RunDir(candidate)
    return None


@dataclass
class Loaded:
    """A model set up to sample a task's problems as a run would."""

    cfg: Config
    components: Any
    model: Any
    tokenizer: Any
    runner: Any


def load_for_eval(
    model: str | Path, overrides: tuple[str, ...], task: str | None, config: str | Path | None
) -> Loaded:
    """`model` with its run's config (a run directory or its final/) or with `task`'s."""
    from rlvr.models.loading import load_model, resolve_device
    from rlvr.rollout.build import build_engine, make_runner
    from rlvr.train.components import build_components
    from rlvr.train.prompt_fit import fit_prompts

    model_path, run = str(model), run_of(Path(model))
    named = [f"task.name={task}"] if task else []
    if run is not None:
        base = run.load_config().model_dump(mode="json")
        cfg = load_config(config, [*named, *overrides], base=base)
        model_path = str(run.final)
    elif task:
        cfg = _config(config, (*named, *overrides))
    else:
        raise ConfigError(
            f"{model} is not a run directory, so name the task it is evaluated on; fix: "
            "task=<name> (--task <name> on the command line) and its settings, or a run directory"
        )
    components = build_components(cfg)
    tokenizer = fit_prompts(cfg, components.task, model_path)
    loaded, tokenizer = load_model(
        model_path, cfg.model.dtype, cfg.model.trust_remote_code, tokenizer=tokenizer
    )
    loaded = loaded.to(resolve_device(cfg.model.device))
    engine = build_engine(cfg, loaded, tokenizer, model_path)  # rollout.engine=vllm works too
    engine = components.methods.engine(engine, loaded, tokenizer, training=False)
    runner_ = make_runner(cfg, loaded, tokenizer, components, engine=engine)
    return Loaded(cfg, components, loaded, tokenizer, runner_)


def evaluate(
    model: str | Path,
    *overrides: str,
    task: str | None = None,
    config: str | Path | None = None,
) -> dict[str, float]:
    """Held-out greedy accuracy and pass@k, as `rlvr eval` prints them. A run directory (or its
    final/) brings its own config, so the numbers are those of its summary.json (every eval
    draws the same seeds); any other model directory or hub id needs `task`."""
    from rlvr.train.evaluate import evaluate as evaluate_runner

    m = load_for_eval(model, overrides, task, config)
    problems = m.components.task.eval_problems()
    return evaluate_runner(m.runner, problems, m.cfg.train.eval_k, m.cfg.train.seed)


def analyze(
    model: str | Path,
    *overrides: str,
    task: str | None = None,
    config: str | Path | None = None,
    k: int = 64,
    problems: int = 50,
    ablate: bool = False,
) -> dict:
    """What RL changed in a model, as `rlvr analyze` prints it (rlvr/analysis/analyze.py):
    pass@1..k from k samples of each of the first `problems` held-out problems, answer
    diversity, reply entropy, layer probes of correctness, and the log-probability of the
    task's reference replies; `ablate` adds each layer's mean-ablation drop in greedy accuracy
    (rlvr/analysis/mechanism.py). Models analysed with the same task and seed see the same
    problems and sampling seeds, so their results compare side by side."""
    from rlvr.analysis.analyze import analyze_samples

    m = load_for_eval(model, overrides, task, config)
    chosen = m.components.task.eval_problems()[:problems]
    return analyze_samples(
        m.model, m.tokenizer, m.runner, m.components.task, chosen, k, m.cfg, ablate
    )


@dataclass
class Run:
    """A finished or running run directory, read back."""

    path: Path
    config: Config
    summary: dict | None  # None until the run finishes
    metrics: list[dict]  # metrics.jsonl: one record per step, evals included
    samples: list[dict]  # samples.jsonl

    def model(self) -> tuple[Any, Any]:
        """(model, tokenizer) of the run's final/ as Hugging Face objects."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        final = self.path / "final"
        if not final.is_dir():
            raise FileNotFoundError(f"{self.path} has no final/ yet; the run has not finished")
        return AutoModelForCausalLM.from_pretrained(final), AutoTokenizer.from_pretrained(final)


def load_run(path: str | Path) -> Run:
    """The run directory at `path` (runs/<name>): its config, summary, metrics and samples."""
    from rlvr.train.rundir import RunDir

    run = RunDir(Path(path))
    if not run.config_file.is_file():
        raise FileNotFoundError(f"{path} is not a run directory (no config.yaml)")

    def read(file: Path) -> list[dict]:
        return (
            [json.loads(line) for line in file.read_text().splitlines()] if file.is_file() else []
        )

    summary = run.read_summary() if run.summary_file.is_file() else None
    return Run(run.path, run.load_config(), summary, read(run.metrics_file), read(run.samples_file))
