"""Layer-wise correctness probes: a probe finds a layer that encodes the label and not one that
does not; features are read at the reply's own tokens."""

import numpy as np

from rlvr.analysis.probes import layer_features, probe_accuracy
from rlvr.types import Problem, Trajectory


def test_a_probe_reads_an_informative_layer_and_not_noise():
    rng = np.random.default_rng(0)
    labels = np.array([0, 1] * 40)
    noise = rng.normal(size=(80, 8))
    informative = noise.copy()
    informative[:, 3] += 6.0 * labels  # one direction carries the label
    assert probe_accuracy(informative, labels) > 0.95
    assert probe_accuracy(noise, labels) < 0.75
    assert probe_accuracy(noise, np.array([1] * 78 + [0] * 2)) is None  # too few of a class


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
