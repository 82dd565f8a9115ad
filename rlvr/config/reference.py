"""The config reference, docs/config.md: a table of every key, its default and its
description, read off the sections and the Params of tasks, rewards, methods, advantage
estimators and losses."""

from __future__ import annotations

import json
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from rlvr.config.root import Config


def _param_rows(prefix: str, model: type[BaseModel]) -> list[str]:
    """Table rows of a Params model; nested models are flattened to dotted keys."""
    rows = []
    for name, sub in model.model_fields.items():
        if isinstance(sub.annotation, type) and issubclass(sub.annotation, BaseModel):
            rows += _param_rows(f"{prefix}.{name}", sub.annotation)
            continue
        default = sub.default_factory() if sub.default_factory else sub.default
        shown = "required" if sub.is_required() else f"`{json.dumps(to_jsonable_python(default))}`"
        rows.append(f"| `{prefix}.{name}` | {shown} | {sub.description} |")
        item = get_args(sub.annotation)[0] if get_origin(sub.annotation) is list else None
        if isinstance(item, type) and issubclass(item, BaseModel):  # a list of rules: their keys
            rows += _param_rows(f"{prefix}.{name}[]", item)
    return rows


def _table(title: str, rows: list[str]) -> list[str]:
    return [title, "", "| key | default | description |", "|---|---|---|", *rows, ""]


def _summary(obj: Any) -> str:
    """The first paragraph of `obj`'s docstring on one line."""
    return " ".join((obj.__doc__ or "").strip().split("\n\n")[0].split())


def _function_tables(key: str, kind: str, functions: dict[str, Any]) -> list[str]:
    """A table per function of `functions` (estimators or losses) that declares `Params`: the
    keys of `key` (algo.advantage_params, algo.loss_params) when algo.<kind> names it."""
    lines = []
    for name, fn in sorted(functions.items()):
        if hasattr(fn, "Params"):
            title = f'### `{key}` ({kind} = "{name}"): {_summary(fn)}'
            lines += _table(title, _param_rows(key, fn.Params))
    return lines


def config_reference(
    tasks: dict[str, Any],
    rewards: dict[str, Any],
    methods: dict[str, Any],
    advantages: dict[str, Any],
    losses: dict[str, Any],
) -> str:
    """Markdown table of every key, its default and its description (docs/config.md); the
    `Params` models of `tasks`, of reward classes in `rewards`, of `methods` and of the
    functions in `advantages` and `losses` add their own keys."""
    lines = [
        "# Config reference",
        "",
        "Generated from `rlvr/config/` by `python -m rlvr.config > docs/config.md`; a test keeps it current.",
        "Set keys in a TOML/YAML file or on the command line as `section.key=value`.",
        "",
    ]
    for section, field in Config.model_fields.items():
        if section == "methods":  # a table per method, each from its own Params
            lines += [f"## `methods`: {field.description}", ""]
            for name, method in sorted(methods.items()):
                summary = " ".join(method.__doc__.split())
                rows = _param_rows(f"methods.{name}", method.Params)
                lines += _table(f"### `methods.{name}`: {summary}", rows)
            continue
        lines += _table(
            f"## `{section}`: {field.description}", _param_rows(section, field.annotation)
        )
        if section == "algo":
            lines += _function_tables("algo.advantage_params", "advantage", advantages)
            lines += _function_tables("algo.loss_params", "loss", losses)
        if section != "task":
            continue
        for name, task_cls in sorted(tasks.items()):
            title = f'### `task.name = "{name}"`: {task_cls.__doc__}'
            lines += _table(title, _param_rows("task", task_cls.Params))
        for name, reward in sorted(rewards.items()):
            if isinstance(reward, type) and hasattr(reward, "Params"):
                summary = reward.__doc__.strip().splitlines()[0]
                title = f"### `task.reward_params.{name}`: {summary}"
                lines += _table(title, _param_rows(f"task.reward_params.{name}", reward.Params))
    return "\n".join(lines)
