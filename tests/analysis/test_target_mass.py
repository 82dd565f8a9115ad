import math

import pytest
import torch

from rlvr.analysis.target_mass import reply_logprobs, reply_tokens, target_mass
from rlvr.models.tiny import build_model
from rlvr.types import Problem

PROBLEMS = [
    Problem(id="a", prompt="Say the word (abcd)", answer="reward"),
    Problem(id="b", prompt="Hi", answer="ok"),
]


@pytest.fixture(scope="module")
def uniform_model(tokenizer):
    """Every next-token distribution uniform over the vocabulary (zero output weights)."""
    model = build_model("nano", tokenizer, seed=0)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied: the embeddings are zero too, so logits are 0
    return model.eval()


def test_uniform_model_gives_one_over_vocab_per_reply_token(uniform_model, tokenizer):
    # "reward" is 6 characters, then the end-of-turn token: 7 draws at 1/V each.
    vocab = uniform_model.config.vocab_size
    mass = target_mass(uniform_model, tokenizer, PROBLEMS)
    assert mass.tolist() == pytest.approx([-7 * math.log(vocab), -3 * math.log(vocab)], rel=1e-5)


def test_matches_a_forward_pass_by_hand(tiny_model, tokenizer):
    # Batched and padded, it equals the logprobs of each sequence alone, summed over the reply
    # tokens only (the prompt's tokens are given, not chosen).
    replies = ["reward", "okay then"]
    batched = reply_logprobs(tiny_model, tokenizer, PROBLEMS, replies)
    for problem, reply, got in zip(PROBLEMS, replies, batched):
        ids, mask = reply_tokens(tokenizer, problem, reply)
        with torch.no_grad():
            logits = tiny_model(input_ids=torch.tensor([ids])).logits[0]
        logp = torch.log_softmax(logits.double(), -1)
        start = mask.index(1)
        expected = sum(float(logp[t - 1, ids[t]]) for t in range(start, len(ids)))
        assert sum(mask) == len(reply) + 1 and ids[-1] == tokenizer.eos_token_id
        assert float(got) == pytest.approx(expected, abs=1e-4)


def test_the_end_of_turn_token_counts(tiny_model, tokenizer):
    # A reply that goes on is a different reply: its prefix gets no credit for the longer one.
    short, longer = reply_logprobs(tiny_model, tokenizer, [PROBLEMS[0]] * 2, ["rew", "reward"])
    assert short != longer
