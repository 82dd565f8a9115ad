"""Score a response with a reasoning-gym dataset's own `score_answer`, and open those datasets by name."""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import fields
from typing import Any

from rlvr.rewards.answers import extract_answer
from rlvr.types import Problem, Score

LIST_COMMAND = "python -c 'import reasoning_gym.factory as f; print(sorted(f.DATASETS))'"


def _close(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def open_dataset(name: str, config: dict[str, Any], **settings: Any) -> Any:
    """`reasoning_gym.create_dataset(name, **config, **settings)`; a ValueError names what is wrong."""
    # Imported here, not at the top: importing reasoning_gym takes most of a second, which every
    # rlvr command would pay since the reward registry imports this module.
    from reasoning_gym.composite import DatasetSpec
    from reasoning_gym.factory import DATASETS, create_dataset

    if name not in DATASETS:
        raise ValueError(
            f"reasoning-gym has no dataset {name!r}.{_close(name, list(DATASETS))} "
            f"List them all with: {LIST_COMMAND}"
        )
    # seed and size are every dataset's; callers pass them as settings, apart from config.
    known = [f.name for f in fields(DATASETS[name][1]) if f.name not in ("seed", "size")]
    for key in config:
        if key not in known:
            raise ValueError(
                f"reasoning-gym dataset {name!r} has no setting {key!r}.{_close(key, known)} "
                f"Its settings: {', '.join(known) or 'none'}"
            )
    arguments = dict(config)
    if name == "composite" and isinstance(config.get("datasets"), list):
        # The composite config wants DatasetSpec objects; a config file can only give mappings.
        arguments["datasets"] = [
            DatasetSpec(**{"weight": 1.0, "config": {}, **spec}) if isinstance(spec, dict) else spec
            for spec in config["datasets"]
        ]
    try:
        return create_dataset(name, **arguments, **settings)
    except Exception as e:
        # Datasets check their settings with assert, so the reason is often an AssertionError.
        raise ValueError(
            f"reasoning-gym dataset {name!r} rejected config {json.dumps(config, default=str)}: "
            f"{type(e).__name__}: {e}"
        ) from None


@functools.lru_cache(maxsize=32)
def _scorer(name: str, config_json: str) -> Any:
    # Some scorers read the dataset's settings (decimal_arithmetic, time_intervals, arc_agi, ...),
    # so scoring needs a dataset built with the task's config, not get_score_answer_fn's defaults.
    return open_dataset(name, json.loads(config_json))


def response_answer(response: str) -> str | None:
    """The last <answer>...</answer> as reasoning-gym reads it, else the shared extractors' answer."""
    from reasoning_gym.utils import extract_answer as tagged_answer

    return tagged_answer(response) or extract_answer(response)


def reasoning_gym_score(problem: Problem, response: str) -> Score:
    """A reasoning-gym dataset's own score_answer on the <answer>; partial credit kept, ok only at 1."""
    meta = problem.metadata
    if "entry" not in meta or "dataset" not in meta:
        raise ValueError(
            f"problem {problem.id} has no reasoning-gym entry in its metadata; "
            "this verifier scores problems of the reasoning_gym task"
        )
    answer = response_answer(response)
    if not answer:
        return Score(0.0, "wrong", {"reason": "no answer found"})
    scorer = _scorer(meta["dataset"], json.dumps(meta.get("config", {}), sort_keys=True))
    value = float(scorer.score_answer(answer, meta["entry"]))
    return Score(value, "ok" if value >= 1 else "wrong")
