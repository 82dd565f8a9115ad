"""Lookup in the plain-dict registries, with did-you-mean errors and `module:attr` plugins, and
validation of a component's own params (and binding them to a registered function)."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rlvr.config import ConfigError, suggest


def load_object(path: str) -> Any:
    """Import `package.module:attr` (a user's own task, reward, estimator ...)."""
    module_name, _, attr = path.partition(":")
    if os.getcwd() not in sys.path:  # the `rlvr` script does not put the working directory there
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import '{module_name}' for '{path}': {e}") from e
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"module '{module_name}' has no attribute '{attr}' (from '{path}')."
        ) from None


def lookup(registry: dict[str, Any], name: str, key: str, group: str | None = None) -> Any:
    """Resolve `name` in `registry`, a `module:attr` path, or an installed entry point.

    `key` is the config key the name came from, so the error can say what to change;
    `group` is the entry-point group third-party packages register under (e.g. 'rlvr.rewards').
    """
    if name in registry:
        return registry[name]
    if ":" in name:
        return load_object(name)
    if group:
        for ep in entry_points(group=group):
            if ep.name == name:
                return ep.load()
    raise ConfigError(
        f"{key} = {name!r} is not registered.{suggest(name, list(registry))} "
        f"Known: {', '.join(sorted(registry))}; or give a 'module:attr' path to your own."
    )


def validate_params(model: type[BaseModel], settings: dict, prefix: str, extra_known=()) -> Any:
    """`model(**settings)`, or a ConfigError naming each bad key under `prefix` and the fix."""
    try:
        return model.model_validate(settings)
    except ValidationError as e:
        known = [f"{prefix}.{k}" for k in [*model.model_fields, *extra_known]]
        lines = []
        for err in e.errors():
            key = ".".join([prefix, *map(str, err["loc"])])
            if err["type"] == "extra_forbidden":
                lines.append(f"unknown key '{key}'.{suggest(key, known)}")
            else:
                lines.append(f"{key} = {_nested(settings, err['loc'])!r}: {err['msg']}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines)) from None


class FnParams(BaseModel):
    """The settings of a registered function (an advantage estimator's or a loss's), declared as
    its `Params` and given in the config as algo.advantage_params / algo.loss_params: a mistyped
    key is an error."""

    model_config = ConfigDict(extra="forbid")


def fn_params(fn: Callable, settings: dict, key: str, what: str) -> BaseModel | None:
    """`settings` validated against `fn.Params` (None for a function without one, which then
    refuses any settings). `key` is where they came from (e.g. 'algo.loss_params'), `what`
    names the function in the message (e.g. "loss 'sapo'")."""
    model = getattr(fn, "Params", None)
    if model is None:
        if settings:
            raise ConfigError(f"{key}: {what} takes no settings; fix: remove {key}.")
        return None
    return validate_params(model, settings, key)


def bind_params(fn: Callable, params: BaseModel) -> Callable:
    """`fn` with `params` bound as its keyword `params`. The attributes callers read off the
    function (requires, min_group_size, advantage_weighted, ...) and its name and docstring
    carry over, so the bound function stands in for it wherever it is called or inspected."""
    return functools.update_wrapper(functools.partial(fn, params=params), fn)


def _nested(settings: Any, loc: tuple) -> Any:
    for part in loc:
        settings = settings.get(part) if isinstance(settings, dict) else None
    return settings


def describe(registry: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, the docstring's first paragraph on one line) pairs for `rlvr list`: the summary
    whole, not its first line cut mid-sentence."""
    rows = []
    for name, obj in sorted(registry.items()):
        text = obj if isinstance(obj, str) else getattr(obj, "__doc__", None) or ""
        paragraph = text.strip().split("\n\n")[0]
        rows.append((name, " ".join(line.strip() for line in paragraph.splitlines())))
    return rows
