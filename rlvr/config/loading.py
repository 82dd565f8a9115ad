"""From a file and command-line overrides to a validated Config, with messages that name
the key and the fix; and back to YAML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from rlvr.config.base import ConfigError, suggest
from rlvr.config.root import Config

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


# Keys that moved to a method's own table, or to the settings of the estimator or loss that
# reads them: a config that still uses one is told where it went.
RENAMED = {
    "algo.elliptical_beta": "methods.repexp.beta",
    "algo.elliptical_dim": "methods.repexp.dim",
    "algo.elliptical_lambda": "methods.repexp.ridge_lambda",
    "algo.elliptical_leave_one_out": "methods.repexp.leave_one_out",
    "algo.repetition_penalty_delta": "methods.river.penalty_delta",
    "algo.repetition_jaccard": "methods.river.jaccard",
    "algo.repetition_cap": "methods.river.penalty_cap",
    "task.filter": "methods.river.filter",
    "task.filter_pool": "methods.river.pool",
    "task.filter_oracle": "methods.river.oracle",
    "task.filter_k": "methods.river.k",
    "algo.rfpo_label_steps": "methods.rfpo.label_steps",
    "algo.rfpo_label_share": "methods.rfpo.label_share",
    "algo.rfpo_calibration_rollouts": "methods.rfpo.calibration_rollouts",
    "algo.rgpo_segments": "methods.rgpo.segments",
    "algo.rgpo_sft_coef": "methods.rgpo.sft_coef",
    "algo.teacher": "methods.direct_opd.teacher",
    "algo.teacher_ref": "methods.direct_opd.teacher_ref",
    "algo.teacher_coef": "methods.direct_opd.coef",
    "algo.teacher_top_k": "methods.direct_opd.top_k",
    "algo.teacher_kl_coefs": "methods.direct_opd.kl_coefs",
    "algo.domain_teachers": "methods.direct_opd.domain_teachers",
    "rollout.dispatch_threads": "methods.parason.dispatch",
    **{
        f"algo.parallel_{k}": f"methods.parason.{k}"
        for k in (
            "accel_weight",
            "accel_cap",
            "subtask_beta",
            "trial_beta",
            "ratio_beta",
            "latency_alpha",
        )
    },  # fmt: skip
    "rollout.branch_model": "methods.w2spo.model",
    "rollout.branch_tokens": "methods.w2spo.tokens",
    "rollout.branch_share": "methods.w2spo.share",
    "algo.weight_samples": "methods.c3po.weight_samples",
    "algo.weight_noise_ess": "methods.c3po.ess",
    "algo.weight_noise_floor": "methods.c3po.prior_precision",
    **{
        f"algo.poise_{k}": f"methods.poise.{k}"
        for k in (
            "layer",
            "bootstrap_steps",
            "buffer",
            "ridge_alpha",
            "prompt_dims",
            "response_dims",
        )
    },  # fmt: skip
    "algo.turn_coef": "algo.advantage_params.turn_coef",
    "algo.tree_outcome_coef": "algo.advantage_params.outcome_coef",
    "algo.tree_dedup_shared": "algo.advantage_params.dedup_shared",
    "algo.remax_reward_to_go": "algo.advantage_params.reward_to_go",
    "algo.lam_mode": "algo.advantage_params.lam_mode",
    "algo.lam_alpha": "algo.advantage_params.lam_alpha",
    "algo.whiten_advantages": "algo.advantage_params.whiten_advantages",
    "algo.pass_k": "algo.advantage_params.k",
    "algo.q_beta": "algo.advantage_params.beta",  # and ALSO_MOVED
    "algo.dual_clip_c": "algo.loss_params.c",
    "algo.sapo_tau_pos": "algo.loss_params.tau_pos",
    "algo.sapo_tau_neg": "algo.loss_params.tau_neg",
    "algo.gmpo_clip": "algo.loss_params.clip",
    "algo.dro_beta": "algo.loss_params.beta",
    "algo.dppo_tv_delta": "algo.loss_params.tv_delta",
    "algo.dppo_kl_delta": "algo.loss_params.kl_delta",
    "algo.dppo_ratio_cap": "algo.loss_params.ratio_cap",
    "algo.kl_cov_ratio": "algo.loss_params.ratio",
    "algo.kl_cov_coef": "algo.loss_params.coef",
    "algo.clip_cov_ratio": "algo.loss_params.ratio",
    "algo.clip_cov_lb": "algo.loss_params.lb",
    "algo.clip_cov_ub": "algo.loss_params.ub",
    "algo.dis_clip_low": "algo.loss_params.clip_low",
    "algo.dis_clip_high": "algo.loss_params.clip_high",
}
# Keys that moved to a second home as well: soft Q-learning's estimator and loss each take beta.
ALSO_MOVED = {"algo.q_beta": "algo.loss_params.beta"}
# What a moved key's new home is, by the start of its new name.
HOMES = {
    "methods.": "the method's own table",
    "algo.advantage_params.": "a setting of the chosen algo.advantage",
    "algo.loss_params.": "a setting of the chosen algo.loss",
}


def _known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _known_keys(ann, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def _field_type(key: str) -> Any:
    model: Any = Config
    annotation = None
    for part in key.split("."):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return None
        annotation = fields[part].annotation
        model = annotation
    return annotation


def _default(key: str) -> Any:
    """The default of a leaf key such as 'rollout.max_new_tokens' or 'model.lora.r', else None."""
    model: Any = Config
    sub = None
    for part in key.split("."):
        sub = getattr(model, "model_fields", {}).get(part)
        if sub is None:
            return None
        model = sub.annotation
    if sub is None or sub.is_required() or isinstance(model, type) and issubclass(model, BaseModel):
        return None
    return sub.default_factory() if sub.default_factory else sub.default


def _parse_value(key: str, text: str) -> Any:
    """Command-line values are YAML scalars/lists (0.02, true, [add, mul], {numeric: 1.0}),
    except for text fields, which keep what was typed (log.name=2024 stays a string, and
    algo.tis=off the word, not YAML's false)."""
    kind = _field_type(key)
    words = get_origin(kind) is Literal and all(isinstance(a, str) for a in get_args(kind))
    if kind in (str, str | None) or words:
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def set_dotted(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{key}': '{part}' is a value, not a section.")
        node = child
    node[parts[-1]] = value


def read_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file {path} does not exist; fix: check the path (examples/ holds ready configs)."
        )
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(
            f"config file {path} line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
            f"{column}); fix: save the file as UTF-8, e.g. from Latin-1 with "
            f"`iconv -f latin1 -t utf-8 {path} > {path.with_stem(path.stem + '.utf8')}`"
        ) from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(
                f"config file {path}: unknown extension; fix: use .toml, .yaml or .yml."
            )
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"config file {path} is not valid {path.suffix[1:].upper()}: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections (model, task, ...).")
    return data


def _explain(error: ValidationError, data: dict[str, Any]) -> str:
    lines = []
    known = _known_keys(Config)
    for err in error.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(
                f"unknown key '{key}'.{suggest(key, known)} (see docs/config.md for every key)"
            )
            continue
        value: Any = data
        for part in err["loc"]:
            if isinstance(value, dict):
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and part < len(value):
                value = value[part]
            else:
                value = None
        msg = err["msg"].removeprefix("Value error, ")
        if not key:
            lines.append(msg)
            continue
        default = _default(key)
        fix = f"; fix: e.g. the default, {key}={json.dumps(default)}" if default is not None else ""
        lines.append(f"{key} = {value!r}: {msg}{fix}")
    return "invalid config:\n  " + "\n  ".join(lines)


def _moved_line(old: str) -> str:
    new = [RENAMED[old], *([ALSO_MOVED[old]] if old in ALSO_MOVED else [])]
    homes = [next(text for start, text in HOMES.items() if n.startswith(start)) for n in new]
    return (
        f"'{old}' moved to {' and '.join(map(repr, new))} ({' and '.join(homes)}); fix: write "
        f"{' and '.join(new)} instead"
    )


def _moved(data: dict[str, Any]) -> None:
    """A ConfigError naming each key of `data` that moved, and where to."""
    found = [
        key
        for key in RENAMED
        if isinstance(data.get(key.split(".")[0]), dict)
        and key.split(".")[1] in data[key.split(".")[0]]
    ]
    if found:
        raise ConfigError("invalid config:\n  " + "\n  ".join(map(_moved_line, found)))


def build_config(data: dict[str, Any]) -> Config:
    _moved(data)
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_explain(e, data)) from None


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    base: dict[str, Any] | None = None,
) -> Config:
    """Read a TOML/YAML file (or start from `base`, else defaults) and apply `section.key=value` overrides."""
    data = read_file(path) if path else dict(base or {})
    known = _known_keys(Config)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"override '{item}' has no '='; fix: write section.key=value, e.g. train.steps=50."
            )
        key, text = item.split("=", 1)
        key = key.strip()
        if "." not in key:
            raise ConfigError(
                f"override '{item}': keys are dotted (section.key).{suggest(key, known)}"
            )
        set_dotted(data, key, _parse_value(key, text))
    return build_config(data)


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
