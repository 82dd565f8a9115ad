"""Layer-wise linear probes of correctness (seed §8g): how well each layer's hidden state, read
on a sampled reply, predicts whether the reply is right; where the model "knows" it."""

from __future__ import annotations

import numpy as np
import torch

from rlvr.types import Batch, Trajectory

ROWS_PER_PASS = 32  # bounds the hidden states of one forward pass
FOLDS = 5


LAST_TOKENS = 10  # POISE's features: the mean hidden state of the last 10 prompt / reply tokens


def last_mean(hidden: torch.Tensor, mask: torch.Tensor, k: int = LAST_TOKENS) -> torch.Tensor:
    """[B, H]: the mean of hidden [B, T, H] over the last k positions of each row where mask
    [B, T] (bool) holds (fewer when fewer hold; 0 when none does)."""
    from_end = mask.flip(-1).long().cumsum(-1).flip(-1)  # masked positions at or after t
    keep = (mask & (from_end <= k)).to(hidden.dtype)
    return (hidden * keep[..., None]).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)


@torch.no_grad()
def layer_features(model, trajectories: list[Trajectory], pad_id: int) -> list[np.ndarray]:
    """Per layer (the embeddings, then each decoder layer), [N, H] features of the sampled
    replies: the mean hidden state over each reply's last tokens."""
    batch = Batch.from_trajectories(trajectories, pad_id)
    # position t of loss_mask [B, T-1] marks token t + 1 as the policy's: the reply's positions
    reply = torch.zeros_like(batch.attention_mask, dtype=torch.bool)
    reply[:, 1:] = batch.loss_mask.bool()
    per_layer: list[list[torch.Tensor]] = []
    model.eval()
    for start in range(0, len(batch), ROWS_PER_PASS):
        rows = slice(start, start + ROWS_PER_PASS)
        out = model(
            input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows],
            output_hidden_states=True,
        )  # fmt: skip
        for layer, hidden in enumerate(out.hidden_states):
            if layer == len(per_layer):
                per_layer.append([])
            per_layer[layer].append(last_mean(hidden.float(), reply[rows]).cpu())
    return [torch.cat(parts).numpy() for parts in per_layer]


def probe_scores(features: np.ndarray, labels: np.ndarray, seed: int = 0) -> dict | None:
    """Held-out `accuracy` and `auc` (ROC AUC) of a logistic-regression probe predicting
    `labels` from `features` [N, D]: each the mean over stratified folds of its score on the
    fold the probe did not see; None when a class has fewer samples than folds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_validate
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if min(labels.sum(), len(labels) - labels.sum()) < FOLDS:
        return None
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
    scores = cross_validate(probe, features, labels, cv=folds, scoring=("accuracy", "roc_auc"))
    return {
        "accuracy": float(scores["test_accuracy"].mean()),
        "auc": float(scores["test_roc_auc"].mean()),
    }


def layer_probes(model, trajectories: list[Trajectory], pad_id: int) -> dict[str, float]:
    """Per layer, `probe/layer_<l>` (held-out accuracy) and `probe_auc/layer_<l>` (held-out ROC
    AUC; 0.5 is chance), and `probe/majority` (always guessing the more common label), which a
    layer's accuracy must beat to know anything; {} when the replies are (nearly) all right or
    all wrong."""
    labels = np.array([t.correct for t in trajectories], dtype=int)
    scores = [probe_scores(f, labels) for f in layer_features(model, trajectories, pad_id)]
    if scores[0] is None:
        return {}
    out = {"probe/majority": float(max(labels.mean(), 1 - labels.mean()))}
    out.update({f"probe/layer_{layer}": s["accuracy"] for layer, s in enumerate(scores)})
    out.update({f"probe_auc/layer_{layer}": s["auc"] for layer, s in enumerate(scores)})
    return out
