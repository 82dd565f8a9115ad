"""Merge models fine-tuned from one base: each parameter's task vectors (fine-tune minus base)
combined by a registered method, added back to the base (M2RL's train-then-merge)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import PeftModel
from peft.utils import merge_utils

from rlvr.models.loading import load_model
from rlvr.registry import lookup


@dataclass(frozen=True)
class MergeSettings:
    weights: tuple[float, ...]  # one per model; task arithmetic's lambda multiplies them all
    scale: float = 1.0
    density: float | None = None  # share of each task vector kept; None = the method's default
    seed: int = 0  # DARE's random drops


# [T, *shape] task vectors of one parameter -> its merged task vector [*shape]
MergeFn = Callable[[torch.Tensor, MergeSettings], torch.Tensor]

DEFAULT_DENSITY = {"ties": 0.2, "dare_ties": 0.8, "dare_linear": 0.8}  # M2RL's: top 20%, p = 0.2


def _weights(deltas: torch.Tensor, settings: MergeSettings) -> torch.Tensor:
    return torch.tensor(settings.weights, dtype=deltas.dtype) * settings.scale


def average(deltas: torch.Tensor, settings: MergeSettings) -> torch.Tensor:
    """The mean of the models (the base plus the mean task vector); weights and scale unused."""
    return deltas.mean(0)


def task_arithmetic(deltas: torch.Tensor, settings: MergeSettings) -> torch.Tensor:
    """scale * sum_k w_k delta_k."""
    return merge_utils.task_arithmetic(list(deltas), _weights(deltas, settings))


def ties(deltas: torch.Tensor, settings: MergeSettings) -> torch.Tensor:
    """TIES: keep each task vector's largest-magnitude share, elect each entry's sign by the
    summed values, average the kept values that agree with it."""
    density = settings.density or DEFAULT_DENSITY["ties"]
    return merge_utils.ties(list(deltas), _weights(deltas, settings), density)


def _dare(combine: Callable, deltas: torch.Tensor, settings: MergeSettings, name: str):
    density = settings.density or DEFAULT_DENSITY[name]
    # peft drops at random from torch's global generator: seed it, and leave it as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        return combine(list(deltas), _weights(deltas, settings), density)


def dare_ties(deltas: torch.Tensor, settings: MergeSettings) -> torch.Tensor:
    """DARE, then TIES's sign election: drop each entry with probability 1 - density and
    rescale the rest by 1 / density, average the survivors that agree with the elected sign."""
    return _dare(merge_utils.dare_ties, deltas, settings, "dare_ties")


def dare_linear(deltas: torch.Tensor, settings: MergeSettings) -> torch.Tensor:
    """DARE's drop and rescale, then the weighted sum."""
    return _dare(merge_utils.dare_linear, deltas, settings, "dare_linear")


def tsv(deltas: torch.Tensor, settings: MergeSettings) -> torch.Tensor:
    """TSV-Merge (arXiv 2412.00081): per matrix, each task's top 1/T singular triplets, their
    left and right singular vectors decorrelated across tasks (the nearest orthonormal basis of
    each concatenation), scaled by `scale`; other parameters take the mean task vector."""
    if deltas.dim() != 3:
        return deltas.mean(0) * settings.scale
    tasks, rows, cols = deltas.shape
    keep = max(1, min(rows, cols) // tasks)
    u, s, vh = torch.linalg.svd(deltas.double(), full_matrices=False)  # batched over tasks
    u_cat = u[:, :, :keep].permute(1, 0, 2).reshape(rows, tasks * keep)  # [rows, T*keep]
    v_cat = vh[:, :keep].permute(2, 0, 1).reshape(cols, tasks * keep)  # [cols, T*keep]
    s_cat = s[:, :keep].reshape(-1)
    # Procrustes: P Q^T is the orthonormal matrix nearest to U = P S Q^T (likewise for V).
    pu, _, qu = torch.linalg.svd(u_cat, full_matrices=False)
    pv, _, qv = torch.linalg.svd(v_cat, full_matrices=False)
    merged = (pu @ qu) @ torch.diag(s_cat) @ (pv @ qv).T
    return (merged * settings.scale).to(deltas.dtype)


MERGES: dict[str, MergeFn] = {
    "average": average,
    "task_arithmetic": task_arithmetic,
    "ties": ties,
    "dare_ties": dare_ties,
    "dare_linear": dare_linear,
    "tsv": tsv,
}


def merge_state_dicts(
    base: dict[str, torch.Tensor],
    models: list[dict[str, torch.Tensor]],
    method: str,
    settings: MergeSettings,
) -> dict[str, torch.Tensor]:
    """base + the merge of the task vectors, parameter by parameter; `method` names a MERGES
    entry or a `module:attr` MergeFn. Every model must have the base's parameter names and
    shapes (fine-tunes of that base)."""
    if len(settings.weights) != len(models):
        raise ValueError(
            f"{len(settings.weights)} weights for {len(models)} models; give one per model"
        )
    combine = lookup(MERGES, method, "rlvr merge --method")
    merged = {}
    for name, start in base.items():
        for index, model in enumerate(models):
            if name not in model or model[name].shape != start.shape:
                found = tuple(model[name].shape) if name in model else "missing"
                raise ValueError(
                    f"model {index + 1}'s parameter {name} is {found}, the base's "
                    f"{tuple(start.shape)}: merging needs models fine-tuned from this base"
                )
        deltas = torch.stack([model[name].float() - start.float() for model in models])
        merged[name] = (start.float() + combine(deltas, settings)).to(start.dtype)
    return merged


def parameters_of(path: str, base_path: str) -> dict[str, torch.Tensor]:
    """A model directory's parameters; for a peft adapter directory, the base's with the adapter
    merged in (its LoRA delta)."""
    if (Path(path) / "adapter_config.json").is_file():
        model, _ = load_model(base_path, key="rlvr merge --base")
        model = PeftModel.from_pretrained(model, path).merge_and_unload()
    else:
        model, _ = load_model(path, key="rlvr merge --models")
    return {name: p.detach() for name, p in model.named_parameters()}


def merge_checkpoints(
    base_path: str, paths: list[str], method: str, settings: MergeSettings, out: Path
) -> Path:
    """Merge the models (full directories or adapters) at `paths` against the base; write the
    result and the base's tokenizer to `out`, where `from_pretrained` loads it."""
    base, tokenizer = load_model(base_path, key="rlvr merge --base")
    start = {name: p.detach() for name, p in base.named_parameters()}
    merged = merge_state_dicts(
        start, [parameters_of(p, base_path) for p in paths], method, settings
    )
    with torch.no_grad():
        for name, parameter in base.named_parameters():
            parameter.copy_(merged[name])
    base.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
