import pytest
import torch
import torch.nn.functional as F

from rlvr.models import logprobs
from rlvr.models.logprobs import ChosenLogprobs, Gather, chunks, token_logprobs


def reference(logits, targets, temperature):
    """The plain formula: a full log-softmax of the scaled logits."""
    logp = F.log_softmax(logits / temperature, -1)
    normaliser = torch.logsumexp(logits / temperature, -1)
    return logp.gather(-1, targets[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1), normaliser


@pytest.mark.parametrize("chunk_elements", [1 << 24, 200, 7], ids=["rows", "row-pieces", "tiny"])
@pytest.mark.parametrize("used", ["all", "chosen", "entropy", "normaliser", "chosen+normaliser"])
def test_logprobs_entropy_normaliser_and_their_gradients_match_a_full_log_softmax(
    monkeypatch, chunk_elements, used
):
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", chunk_elements)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 9, 50, generator=g, dtype=torch.float64) * 4
    targets = torch.randint(0, 50, (3, 9), generator=g)
    weights = torch.randn(3, 3, 9, generator=g, dtype=torch.float64)
    for k, name in enumerate(["chosen", "entropy", "normaliser"]):
        weights[k] *= used == "all" or name in used.split("+")  # a loss without that output
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    outputs = ChosenLogprobs.apply(ours, targets, 0.7, True)
    wanted = reference(theirs, targets, 0.7)
    for got, want in zip(outputs, wanted):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    sum(w * out for w, out in zip(weights, outputs) if w.any()).sum().backward()
    sum(w * want for w, want in zip(weights, wanted)).sum().backward()
    assert theirs.grad.abs().max() > 0.1
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk_elements", [1 << 24, 200, 7], ids=["rows", "row-pieces", "tiny"])
@pytest.mark.parametrize("with_entropy", [False, True])
def test_sum_pi_squared_fills_from_the_same_chunks_without_changing_anything_else(
    monkeypatch, chunk_elements, with_entropy
):
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", chunk_elements)
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(3, 9, 50, generator=g, dtype=torch.float64) * 4).requires_grad_()
    targets = torch.randint(0, 50, (3, 9), generator=g)
    squares = torch.zeros(3, 9, dtype=torch.float64)
    chosen, entropy, _ = ChosenLogprobs.apply(logits, targets, 0.7, with_entropy, squares)
    want = F.softmax(logits.detach() / 0.7, -1).square().sum(-1)
    torch.testing.assert_close(squares, want, rtol=0, atol=1e-12)
    plain_chosen, plain_entropy, _ = ChosenLogprobs.apply(logits, targets, 0.7, with_entropy)
    assert torch.equal(chosen, plain_chosen) and torch.equal(entropy, plain_entropy)
    chosen.sum().backward()  # the filled buffer is no output: backward is unchanged
    grad = logits.grad.clone()
    logits.grad = None
    plain_chosen.sum().backward()
    assert torch.equal(grad, logits.grad)


@pytest.mark.parametrize("chunk_elements", [1 << 24, 7], ids=["rows", "tiny"])
def test_gather_gives_the_log_softmax_of_other_tokens_with_its_gradient(
    monkeypatch, chunk_elements
):
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", chunk_elements)
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 9, 50, generator=g, dtype=torch.float64) * 4
    targets = torch.randint(0, 50, (3, 9), generator=g)
    weights = torch.randn(3, 9, 4, generator=g, dtype=torch.float64)
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    chosen, _, _ = ChosenLogprobs.apply(ours, targets, 0.7, False)
    top = Gather(k=4)  # the model's own 4 likeliest tokens
    top.fill(ours, targets, chosen, 0.7)
    full = F.log_softmax(theirs / 0.7, -1)
    want_ids = full.detach().topk(4, -1).indices
    assert torch.equal(top.ids, want_ids)
    torch.testing.assert_close(top.logprobs, full.gather(-1, want_ids), rtol=0, atol=1e-12)
    (weights * top.logprobs).sum().backward()
    (weights * full.gather(-1, want_ids)).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=0, atol=1e-12)
    given = Gather(torch.randint(0, 50, (3, 9, 2), generator=g))  # ids chosen elsewhere
    given.fill(logits, targets, ChosenLogprobs.apply(logits, targets, 0.7, False)[0], 0.7)
    torch.testing.assert_close(given.logprobs, full.detach().gather(-1, given.ids))


@pytest.mark.parametrize(
    ("shape", "budget"),
    [((5, 7, 3), 1 << 24), ((5, 7, 3), 40), ((2, 9, 4), 4), ((3, 1, 8), 5), ((4, 3, 2), 12)],
)
def test_chunks_cover_every_position_once(monkeypatch, shape, budget):
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", budget)
    seen = torch.zeros(shape[:2], dtype=torch.long)
    for rows, positions in chunks(*shape):
        seen[rows, positions] += 1
    assert torch.equal(seen, torch.ones_like(seen))


def saved_bytes(fn) -> int:
    """Bytes of the tensors autograd keeps for backward while `fn` runs (its own, not its
    inputs')."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_no_float32_copy_of_the_vocabulary_is_kept_for_backward():
    """bf16 logits (what a bf16 model returns): the plain formula keeps float32 copies of the
    whole [B, T, V] block for backward; the chunked one keeps the bf16 logits and [B, T]
    statistics only."""
    logits = torch.randn(2, 16, 1000, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, 1000, (2, 16))
    block = logits.numel() * 4  # one float32 copy
    ours = saved_bytes(lambda: ChosenLogprobs.apply(logits, targets, 1.0, True))
    plain = saved_bytes(lambda: reference(logits.float(), targets, 1.0))
    assert plain >= 2 * block
    assert ours <= logits.numel() * 2 + 4 * 2 * 16 * 8  # the bf16 logits and small tensors


def test_token_logprobs_of_a_model_match_the_plain_formula(tiny_model):
    ids = torch.randint(7, 100, (2, 12))
    chosen, entropy = token_logprobs(tiny_model, ids, torch.ones_like(ids), 0.8, with_entropy=True)
    with torch.no_grad():
        logits = tiny_model(input_ids=ids).logits[:, :-1]
    want_chosen, want_entropy, _ = reference(logits, ids[:, 1:], 0.8)
    torch.testing.assert_close(chosen, want_chosen, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-5)
    assert not entropy.requires_grad and chosen.requires_grad
    _, none = token_logprobs(tiny_model, ids, torch.ones_like(ids))
    assert none is None
