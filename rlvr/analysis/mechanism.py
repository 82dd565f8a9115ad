"""RL against SFT, mechanistically (arXiv 2607.26119): per decoder layer, how well a linear probe
reads answer correctness (held-out AUC) and how much accuracy falls when the layer is
mean-ablated, for several models on the same problems, with each profile's trend over depth."""

from __future__ import annotations

import numpy as np

from rlvr.analysis.ablation import ablation_drops
from rlvr.analysis.probes import layer_probes
from rlvr.types import Problem, Trajectory

MECHANISM_STREAM = 9  # sampling seeds apart from training (0), eval (1), ..., 3PO (7, 8)


def depth_slope(values: list[float]) -> float:
    """Least-squares slope of per-layer `values` over depth scaled to [0, 1] (first layer 0,
    last 1): above 0 when deeper layers score higher, 0 when the layers are alike."""
    return float(np.polyfit(np.linspace(0.0, 1.0, len(values)), values, 1)[0])


def per_layer(result: dict, prefix: str) -> list[float]:
    """`prefix/layer_1`, `prefix/layer_2`, ... of a result, in order, for every decoder layer it
    holds (layer 0, the embeddings, left out)."""
    values, layer = [], 1
    while f"{prefix}/layer_{layer}" in result:
        values.append(result[f"{prefix}/layer_{layer}"])
        layer += 1
    return values


def layer_mechanism(
    model, tokenizer, runner, problems: list[Problem], sampled: list[Trajectory],
    seed: tuple[int, ...],
) -> dict[str, float]:  # fmt: skip
    """Probes (layer_probes) on the model's own `sampled` replies to `problems`, mean-ablation
    drops of greedy accuracy on `problems` with the means taken over `sampled`
    (ablation_drops), and `probe_auc/depth_slope` and `ablation/depth_slope` over the decoder
    layers (no probe keys when the replies are nearly all right or all wrong)."""
    pad_id = tokenizer.pad_token_id
    out = layer_probes(model, sampled, pad_id)
    out.update(ablation_drops(model, runner, problems, sampled, pad_id, seed))
    for prefix in ("probe_auc", "ablation"):
        values = per_layer(out, prefix)
        if len(values) > 1:
            out[f"{prefix}/depth_slope"] = depth_slope(values)
    return out


def compare(
    models: dict[str, tuple], problems: list[Problem], k: int, seed: int = 0
) -> dict[str, dict]:
    """{name: result} for `models` {name: (model, tokenizer, runner)}: each samples k replies
    to every one of the same `problems` from the same seeds, and its `sampled_accuracy` and
    layer_mechanism are measured on them."""
    out = {}
    for name, (model, tokenizer, runner) in models.items():
        sampled = runner.collect(problems, k, (seed, MECHANISM_STREAM, 0))
        accuracy = sum(t.correct for t in sampled) / len(sampled)
        greedy_seed = (seed, MECHANISM_STREAM, 1)
        measured = layer_mechanism(model, tokenizer, runner, problems, sampled, greedy_seed)
        out[name] = {"sampled_accuracy": accuracy, **measured}
    return out
