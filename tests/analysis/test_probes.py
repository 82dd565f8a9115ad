"""Layer-wise correctness probes: a probe finds a layer that encodes the label and not one that
does not, its AUC is the held-out one (each fold scored on rows it did not fit), and features
are read at the reply's own tokens."""

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from rlvr.analysis.probes import layer_features, probe_scores
from rlvr.types import Problem, Trajectory


def test_a_probe_reads_an_informative_layer_and_not_noise():
    rng = np.random.default_rng(0)
    labels = np.array([0, 1] * 40)
    noise = rng.normal(size=(80, 8))
    informative = noise.copy()
    informative[:, 3] += 6.0 * labels  # one direction carries the label
    assert probe_scores(informative, labels)["accuracy"] > 0.95
    assert probe_scores(noise, labels)["accuracy"] < 0.75
    assert probe_scores(noise, np.array([1] * 78 + [0] * 2)) is None  # too few of a class


def held_out_auc(features: np.ndarray, labels: np.ndarray) -> float:
    """By hand: fit on four folds, score the fifth with sklearn's roc_auc_score, average."""
    aucs = []
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(features, labels):
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        probe.fit(features[train], labels[train])
        aucs.append(roc_auc_score(labels[test], probe.predict_proba(features[test])[:, 1]))
    return float(np.mean(aucs))


def test_probe_auc_is_held_out_and_finds_the_layer_with_the_planted_signal():
    rng = np.random.default_rng(1)
    labels = rng.permutation(np.array([0, 1] * 200))
    layers = [rng.normal(size=(400, 6)) for _ in range(4)]
    shift = 1.5
    layers[2][:, 1] += shift * labels  # only layer 2 carries the label, in one direction
    aucs = [probe_scores(features, labels)["auc"] for features in layers]
    for features, auc in zip(layers, aucs):
        assert auc == pytest.approx(held_out_auc(features, labels), abs=1e-12)
    # two unit Gaussians `shift` apart: the best linear score has AUC Phi(shift / sqrt 2) = 0.856
    assert aucs[2] == pytest.approx(norm.cdf(shift / np.sqrt(2)), abs=0.05)
    for layer in (0, 1, 3):
        assert abs(aucs[layer] - 0.5) < 0.1
    # in-sample, the noise layers would look informative: the held-out AUC is what says 0.5
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    noise = rng.normal(size=(40, 30))
    few = np.array([0, 1] * 20)
    fitted = probe.fit(noise, few).predict_proba(noise)[:, 1]
    assert roc_auc_score(few, fitted) > 0.9 and abs(probe_scores(noise, few)["auc"] - 0.5) < 0.25


def test_features_are_one_per_layer_and_read_the_reply(tiny_model, tokenizer):
    def sample(reply_ids):
        ids = [2, 10, 11, *reply_ids]
        mask = [0, 0, 0] + [1] * len(reply_ids)
        return Trajectory(Problem("p", "q"), 0, 0, ids, mask, [0.0] * len(ids), [0.0], [len(ids)])

    same_reply = [sample([20, 21]), sample([20, 21])]
    features = layer_features(tiny_model, same_reply, tokenizer.pad_token_id)
    assert len(features) == tiny_model.config.num_hidden_layers + 1  # embeddings + each layer
    assert features[0].shape == (2, tiny_model.config.hidden_size)
    # the embedding layer's feature is the mean embedding of the reply's tokens alone
    expected = tiny_model.model.embed_tokens.weight[[20, 21]].mean(0).detach().numpy()
    assert np.allclose(features[0][0], expected, atol=1e-6)
    other = layer_features(tiny_model, [sample([30, 31])], tokenizer.pad_token_id)
    assert not np.allclose(other[0][0], features[0][0])
