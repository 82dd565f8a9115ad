"""POISE (arXiv 2605.07579): a probe g predicts a rollout's success rate from the policy's own
hidden states, fitted online (PCA + ridge per problem domain), and the `poise` estimator takes
the mean of the other rollouts' predictions as each rollout's baseline."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import Field

from rlvr.algos.advantages import ADVANTAGES, AdvInputs, sibling_mean
from rlvr.analysis.ablation import decoder_layers
from rlvr.analysis.probes import last_mean
from rlvr.config import ConfigError
from rlvr.registry import lookup
from rlvr.train.hooks import Method, MethodParams, Run, Step


class Params(MethodParams):
    layer: int = Field(
        -1,
        ge=-1,
        description="Decoder layer whose output hidden states feed the probe (0 = the first "
        "layer); -1 = the middle one, num_layers // 2 (the paper's layer 19 of 36 on Qwen3-4B).",
    )
    bootstrap_steps: int = Field(
        16,
        ge=0,
        description="First RL steps that use the rloo baseline while the probe collects data (it "
        "is also rloo for a domain whose probe is not fitted yet).",
    )
    buffer: int = Field(
        2048,
        gt=0,
        description="The most recent rollouts per problem domain the probe is refitted on.",
    )
    ridge_alpha: float = Field(
        100.0, gt=0, description="L2 strength of the probe's ridge regression."
    )
    prompt_dims: int = Field(
        32, gt=0, description="PCA dimensions of the prompt hidden-state feature."
    )
    response_dims: int = Field(
        64, gt=0, description="PCA dimensions of the response hidden-state feature."
    )


MIN_FIT_ROWS = 4  # a domain's probe is fitted once its buffer holds this many rollouts


def rollout_features(
    hidden: torch.Tensor, attention: torch.Tensor, loss_mask: torch.Tensor, entropy: torch.Tensor
) -> torch.Tensor:
    """float32 [B, 2H + 1]: prompt feature, response feature, mean response entropy of each row.

    hidden [B, T, H] at the input positions; attention [B, T]; loss_mask and entropy [B, T-1]
    aligned with targets (column t is token t+1). The prompt is every token up to the input of
    the first policy target; the response is the policy tokens themselves."""
    device = hidden.device
    policy = loss_mask.to(device).bool()
    lengths = attention.to(device).sum(-1)
    first = torch.where(policy.any(-1), policy.int().argmax(-1), lengths - 1)
    positions = torch.arange(hidden.shape[1], device=device)
    prompt = (positions[None] <= first[:, None]) & (positions[None] < lengths[:, None])
    response = torch.cat([torch.zeros_like(policy[:, :1]), policy], -1)  # token t+1 of target t
    on = policy.to(entropy.dtype)
    mean_entropy = (entropy.to(device) * on).sum(-1) / on.sum(-1).clamp(min=1)
    hidden = hidden.float()
    parts = [last_mean(hidden, prompt), last_mean(hidden, response), mean_entropy[:, None].float()]
    return torch.cat(parts, -1)


class LayerFeatures:
    """Collects rollout_features of a no-grad forward pass, micro-batch by micro-batch, from a
    forward hook on one decoder layer (only that layer's output is kept, not every layer's)."""

    def __init__(self, model, layer: int, rows: int):
        layers = decoder_layers(model)
        self.index = len(layers) // 2 if layer == -1 else layer
        if not 0 <= self.index < len(layers):
            raise ConfigError(
                f"methods.poise.layer={layer}, but the model has {len(layers)} decoder layers; "
                f"fix: methods.poise.layer between 0 and {len(layers) - 1}, or -1 (the middle one)"
            )
        self.layer, self.rows = layers[self.index], rows
        self.values: torch.Tensor | None = None  # [rows, 2H + 1] once a micro-batch is added
        self._hidden: torch.Tensor | None = None

    @contextmanager
    def capture(self):
        """Within: every forward of the model records the layer's output hidden states."""

        def hook(module, args, output):
            self._hidden = output[0] if isinstance(output, tuple) else output

        handle = self.layer.register_forward_hook(hook)
        try:
            yield self
        finally:
            handle.remove()

    def add(self, rows, attention, loss_mask, entropy) -> None:
        """The features of `rows` from the last captured forward (of exactly those rows)."""
        features = rollout_features(self._hidden, attention, loss_mask, entropy).cpu()
        if self.values is None:
            self.values = torch.zeros(self.rows, features.shape[1])
        self.values[rows] = features
        self._hidden = None


def _project(x: np.ndarray, fit: dict[str, np.ndarray]) -> np.ndarray:
    """The ridge's design matrix, unscaled: PCA of the prompt and response blocks, and the
    entropy."""
    h = (x.shape[1] - 1) // 2
    prompt = (x[:, :h] - fit["prompt_mean"]) @ fit["prompt_components"].T
    response = (x[:, h : 2 * h] - fit["response_mean"]) @ fit["response_components"].T
    return np.concatenate([prompt, response, x[:, -1:]], axis=1)


def _design(x: np.ndarray, fit: dict[str, np.ndarray]) -> np.ndarray:
    """The ridge's design matrix: each column of _project standardised on the fit's rows (the
    paper's StandardScaler), so ridge_alpha weighs every feature alike whatever its scale."""
    return (_project(x, fit) - fit["scale_mean"]) / fit["scale_std"]


@dataclass
class Baselines:
    """What the probe gives one step's advantages."""

    predictions: torch.Tensor  # [B] float64: AdvInputs.probe_predictions (rewards where not used)
    probe: torch.Tensor  # [B] float64: the probe's own predictions, NaN where it has none
    used: torch.Tensor  # [B] bool: rows whose prediction came from the probe


class Probe:
    """g(z): per problem domain a buffer of recent rollouts (features, target) and a PCA + ridge
    fit on it, kept as plain arrays so a checkpoint restores predictions exactly.

    The target of rollout i is the mean reward of its siblings (the paper's
    other_rollout_correctness): what g(z_i) predicts is the prompt's success rate as seen from
    rollout i, not rollout i's own outcome."""

    def __init__(self, params: Params):
        self.params = params
        self.buffers: dict[str, np.ndarray] = {}  # domain -> [N, F + 1]: features, then target
        self.fits: dict[str, dict[str, np.ndarray]] = {}  # domain -> the fitted arrays

    def predict(self, features: torch.Tensor, domains: list[str]) -> torch.Tensor:
        """float64 [B] in [0, 1]; NaN for a row whose domain has no fitted probe yet."""
        x = features.double().numpy()
        out = np.full(len(domains), np.nan)
        for domain, fit in self.fits.items():
            rows = np.array([d == domain for d in domains], dtype=bool)
            if rows.any():
                out[rows] = _design(x[rows], fit) @ fit["coef"] + fit["intercept"]
        return torch.from_numpy(np.clip(out, 0.0, 1.0))

    def observe(self, features: torch.Tensor, domains: list[str], targets: torch.Tensor) -> None:
        """Append rollouts (features [B, F], targets [B]) to their domains' buffers, keep the most
        recent `buffer`, and refit each domain that got new rows."""
        rows = np.concatenate([features.float().numpy(), targets.float().numpy()[:, None]], 1)
        for domain in dict.fromkeys(domains):  # first-seen order: deterministic
            new = rows[np.array([d == domain for d in domains], dtype=bool)]
            old = self.buffers.get(domain, new[:0])
            self.buffers[domain] = np.concatenate([old, new])[-self.params.buffer :]
            self._fit(domain)

    def _fit(self, domain: str) -> None:
        from sklearn.decomposition import PCA  # imported on first use: it is slow to import
        from sklearn.linear_model import Ridge
        from sklearn.preprocessing import StandardScaler

        data = self.buffers[domain].astype(np.float64)
        if len(data) < MIN_FIT_ROWS:
            return
        x, y = data[:, :-1], data[:, -1]
        h, fit = (x.shape[1] - 1) // 2, {}
        blocks = {"prompt": (x[:, :h], self.params.prompt_dims)}
        blocks["response"] = (x[:, h : 2 * h], self.params.response_dims)
        for name, (block, dims) in blocks.items():
            # capped by the samples at hand early on; the full SVD is exact and deterministic
            pca = PCA(n_components=min(dims, *block.shape), svd_solver="full").fit(block)
            fit[f"{name}_mean"], fit[f"{name}_components"] = pca.mean_, pca.components_
        scaler = StandardScaler().fit(_project(x, fit))
        fit["scale_mean"], fit["scale_std"] = scaler.mean_, scaler.scale_  # a constant column: 1
        ridge = Ridge(alpha=self.params.ridge_alpha).fit(_design(x, fit), y)
        fit["coef"], fit["intercept"] = ridge.coef_, np.asarray(ridge.intercept_, dtype=np.float64)
        # C order, as a checkpoint restores them: a matmul's rounding depends on the layout, so a
        # resumed probe predicts bit for bit what the saved one did
        self.fits[domain] = {name: np.ascontiguousarray(value) for name, value in fit.items()}

    def state_dict(self) -> dict:
        return {
            "buffers": {d: b.copy() for d, b in self.buffers.items()},
            "fits": {d: {k: v.copy() for k, v in f.items()} for d, f in self.fits.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.buffers = {d: np.asarray(b).copy() for d, b in state["buffers"].items()}
        self.fits = {
            d: {k: np.asarray(v).copy() for k, v in f.items()} for d, f in state["fits"].items()
        }

    def baselines(
        self, features: torch.Tensor, domains: list[str], rewards: torch.Tensor, step: int
    ) -> Baselines:
        """This step's AdvInputs.probe_predictions, from the probe as it is before this batch.
        During the first `bootstrap_steps`, and for a domain not fitted yet, a row's
        prediction is its own reward: poise's sibling mean of it is then exactly rloo."""
        probe = self.predict(features, domains)
        used = ~probe.isnan() & (step >= self.params.bootstrap_steps)
        return Baselines(torch.where(used, probe, rewards.double()), probe, used)

    def update(
        self,
        features: torch.Tensor,
        domains: list[str],
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        baselines: Baselines,
    ) -> dict[str, float]:
        """After the advantages: this step's metrics of the probe as it was, then a refit that
        includes the batch (so no advantage ever comes from a probe fitted on its own rollout)."""
        rewards = rewards.double()
        targets = sibling_mean(rewards, group_ids)  # other_rollout_correctness = rloo's baseline
        _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
        paired = counts[index] > 1  # a group of one has no siblings: no target, no advantage
        poise_adv = rewards - sibling_mean(baselines.predictions, group_ids)
        metrics = probe_metrics(baselines.probe[paired], targets[paired])
        metrics["poise/fitted"] = float(baselines.used.double().mean())
        metrics["poise/adv_var"] = _var(poise_adv[paired])
        metrics["poise/rloo_adv_var"] = _var((rewards - targets)[paired])
        kept = [d for d, k in zip(domains, paired.tolist()) if k]
        self.observe(features[paired], kept, targets[paired])
        return metrics


def _var(x: torch.Tensor) -> float:
    return float(x.var()) if x.numel() > 1 else 0.0


def probe_metrics(predictions: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """Brier skill (1 - MSE / Var of the target) and Pearson r of predictions vs targets [B] over
    the rows with a prediction (none before the first fit)."""
    have, metrics = ~predictions.isnan(), {}
    p, t = predictions[have].double(), targets[have].double()
    if len(p) > 1 and float(t.var()) > 0:
        metrics["poise/skill"] = float(1 - ((p - t) ** 2).mean() / t.var(unbiased=False))
        if float(p.std()) > 0:
            metrics["poise/pearson"] = float(torch.corrcoef(torch.stack([p, t]))[0, 1])
    return metrics


class POISE(Method):
    """POISE (arXiv 2605.07579): the `poise` estimator's baseline, a probe of the policy's hidden
    states that predicts each rollout's success rate."""

    Params = Params
    provides = frozenset({"probe_predictions"})

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        estimator = lookup(ADVANTAGES, cfg.algo.advantage, "algo.advantage", "rlvr.advantages")
        if "probe_predictions" not in getattr(estimator, "requires", ()):
            raise ConfigError(
                f"methods.poise fits a probe whose predictions only the poise estimator reads, "
                f"and algo.advantage = '{cfg.algo.advantage}'; fix: algo.advantage=poise"
            )

    def setup(self, run: Run) -> None:
        self.model, self.probe = run.model, Probe(self.params)

    def old_pass(self, step: Step) -> LayerFeatures:
        self.features = LayerFeatures(self.model, self.params.layer, len(step.batch))
        return self.features

    def advantage_inputs(self, step: Step, inputs: AdvInputs) -> None:
        """The probe as fitted on earlier steps only."""
        self.domains = [t.problem.domain for t in step.trajectories]
        self.guess = self.probe.baselines(
            self.features.values, self.domains, inputs.rewards, step.index
        )
        inputs.probe_predictions = self.guess.predictions

    def after_advantages(self, step: Step, inputs: AdvInputs) -> None:
        """Refitted only after its advantages: no advantage comes from a probe fitted on its own
        rollout."""
        step.metrics.update(self.probe.update(
            self.features.values, self.domains, inputs.rewards, inputs.group_ids, self.guess
        ))  # fmt: skip

    def state_dict(self) -> dict:
        return self.probe.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.probe.load_state_dict(state)
