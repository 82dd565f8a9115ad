"""3PO / C3PO: exploration in parameter space. Each step's rollouts sample from a few weight
draws around the trained weights, from a diagonal Gaussian posterior (IVON-style precision)."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from rlvr.models.lora import trainable_state_dict


def posterior_std(second_moment: torch.Tensor, ess: float, floor: float) -> torch.Tensor:
    """sigma = 1 / sqrt(ess * (h + floor)): IVON's posterior scale, with h a diagonal Hessian
    estimate (here the squared-gradient one) and `floor` the prior precision that keeps sigma
    finite where h is 0."""
    return (ess * (second_moment + floor)).rsqrt()


def weight_sample_of(sample_index: int, group_size: int, weight_samples: int) -> int:
    """Which weight draw samples reply `sample_index` (numbered over the batch): each group's
    replies split into `weight_samples` contiguous runs of group_size / weight_samples."""
    return (sample_index % group_size) // (group_size // weight_samples)


class WeightNoise:
    """The posterior N(m, sigma^2) over the trainable weights m (the adapters under LoRA). h is
    the optimizer's bias-corrected running mean of squared gradients (AdamW's exp_avg_sq; 0
    before the first update), so weights the reward is sensitive to move least."""

    def __init__(
        self, model, optimizer: torch.optim.Optimizer, samples: int, ess: float, floor: float
    ):
        self.params = list(trainable_state_dict(model).values())
        self.optimizer, self.samples, self.ess, self.floor = optimizer, samples, ess, floor

    def second_moment(self, param: torch.Tensor) -> torch.Tensor:
        state = self.optimizer.state.get(param, {})
        if "exp_avg_sq" not in state:
            return torch.zeros_like(param)
        beta2 = self.optimizer.param_groups[0]["betas"][1]
        return state["exp_avg_sq"] / (1 - beta2 ** float(state["step"]))

    def stds(self) -> list[torch.Tensor]:
        return [posterior_std(self.second_moment(p), self.ess, self.floor) for p in self.params]

    @contextmanager
    def sampled(self, seed: int):
        """Inside, the trainable weights are m + sigma * z, z ~ N(0, I) drawn from `seed` (the
        same seed, the same draw: a multi-turn episode keeps its weights every turn); after,
        exactly m again."""
        generator = torch.Generator().manual_seed(seed)
        means = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for param, std in zip(self.params, self.stds()):
                noise = torch.randn(param.shape, generator=generator, dtype=param.dtype)
                param.add_(std * noise.to(param.device))
        try:
            yield
        finally:
            with torch.no_grad():
                for param, mean in zip(self.params, means):
                    param.copy_(mean)

    def metrics(self) -> dict[str, float]:
        stds = torch.cat([s.flatten() for s in self.stds()])
        h = torch.cat([self.second_moment(p).flatten() for p in self.params])
        return {
            "weight_sigma_mean": float(stds.mean()),
            "weight_sigma_min": float(stds.min()),
            # where the gradient estimate, not the prior, sets sigma
            "weight_curvature_share": float((h > self.floor).float().mean()),
        }
