"""Mean ablation of a decoder layer (arXiv 2607.26119): the layer's contribution to the residual
stream (its output minus its input) replaced by that contribution's mean over reference text, and
how much greedy accuracy falls without it: which layers a model's answers depend on."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

import torch

from rlvr.config import ConfigError
from rlvr.types import Batch, Problem, Trajectory

ROWS_PER_PASS = 32  # bounds the activations of one forward pass


def decoder_layers(model) -> torch.nn.ModuleList:
    """The model's stack of decoder layers: the ModuleList with config.num_hidden_layers entries
    (model.layers in Llama/Qwen, transformer.h in GPT-2; found through a peft wrapper too)."""
    count = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return module
    raise ConfigError(
        f"found no list of {count} decoder layers in {type(model).__name__}; POISE's probe and "
        "mean ablation hook one of them; fix: a causal LM whose decoder layers are one ModuleList "
        "(Llama, Qwen, Mistral, GPT-2, ...)"
    )


def _layer_input(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _layer_output(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def mean_contributions(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> list[torch.Tensor]:
    """Per decoder layer, float32 [H]: its output minus its input hidden state, averaged over
    every attended position of the reference rows input_ids [N, T] (attention_mask [N, T])."""
    layers = decoder_layers(model)
    sums: list[torch.Tensor | float] = [0.0] * len(layers)
    mask = attention_mask  # the hooks read the mask of the rows being passed

    def recorder(index: int):
        def hook(module, args, kwargs, output):
            delta = (_layer_output(output) - _layer_input(args, kwargs)).float()
            on = mask.to(delta.device, delta.dtype)[..., None]
            sums[index] = sums[index] + (delta * on).sum((0, 1)).cpu()

        return hook

    handles = [layer.register_forward_hook(recorder(i), with_kwargs=True) for i, layer in
               enumerate(layers)]  # fmt: skip
    model.eval()
    device = model.device
    try:
        for start in range(0, len(input_ids), ROWS_PER_PASS):
            rows = slice(start, start + ROWS_PER_PASS)
            mask = attention_mask[rows]
            model(input_ids=input_ids[rows].to(device), attention_mask=mask.to(device))
    finally:
        for handle in handles:
            handle.remove()
    return [total / attention_mask.sum().clamp(min=1) for total in sums]


@contextmanager
def mean_ablated(model, layer: int, mean: torch.Tensor):
    """Within: decoder layer `layer` (0-based) adds `mean` [H] to its input at every position in
    place of what it computes, in every forward of the model (generation included)."""

    def hook(module, args, kwargs, output):
        hidden = _layer_input(args, kwargs)
        ablated = hidden + mean.to(hidden.device, hidden.dtype)
        return (ablated, *output[1:]) if isinstance(output, tuple) else ablated

    handle = decoder_layers(model)[layer].register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def greedy_accuracy(runner, problems: list[Problem], seed: tuple[int, ...]) -> float:
    """The share of `problems` the runner's model answers right greedily."""
    replies = runner.collect(problems, 1, seed, replace(runner.params, temperature=0.0))
    return sum(t.correct for t in replies) / len(replies)


def ablation_drops(
    model, runner, problems: list[Problem], reference: list[Trajectory], pad_id: int,
    seed: tuple[int, ...],
) -> dict[str, float]:  # fmt: skip
    """`ablation/greedy`: greedy accuracy on `problems`; `ablation/layer_<l>`: how much it falls
    with decoder layer l (1-based, the one whose output `probe/layer_<l>` reads) mean-ablated,
    its mean taken over every token (prompt and reply) of the `reference` episodes."""
    if getattr(runner.engine, "model", None) is not model:
        raise ConfigError(
            "mean ablation hooks the model the runner samples with, but this runner's engine "
            f"({type(runner.engine).__name__}) holds another copy; fix: rollout.engine=hf"
        )
    batch = Batch.from_trajectories(reference, pad_id)
    means = mean_contributions(model, batch.input_ids, batch.attention_mask)
    base = greedy_accuracy(runner, problems, seed)
    out = {"ablation/greedy": base}
    for index, mean in enumerate(means):
        with mean_ablated(model, index, mean):
            out[f"ablation/layer_{index + 1}"] = base - greedy_accuracy(runner, problems, seed)
    return out
