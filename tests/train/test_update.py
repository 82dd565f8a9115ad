import copy
import math

import pytest
import torch

from rlvr.algos.losses import ppo_clip
from rlvr.config import load_config
from rlvr.train.update import Imitation, UpdateInputs, batch_logprobs, policy_update
from rlvr.types import Batch, Problem, Trajectory


def random_batch(tokenizer, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    trajectories = []
    for i in range(size):
        prompt_len, reply_len = 4 + i % 3, 3 + (i * 5) % 7
        ids = torch.randint(7, len(tokenizer), (prompt_len + reply_len,), generator=g).tolist()
        trajectories.append(
            Trajectory(
                Problem(str(i), "x"),
                group_id=i // 4,
                sample_index=i,
                token_ids=ids,
                loss_mask=[0] * prompt_len + [1] * reply_len,
                behaviour_logprobs=[0.0] * len(ids),
                turn_rewards=[float(i % 2)],
                turn_ends=[len(ids)],
            )
        )
    return Batch.from_trajectories(trajectories, tokenizer.pad_token_id)


def run_update(
    model,
    tokenizer,
    micro_batch_size,
    epochs=2,
    minibatches=2,
    optimizer="adamw",
    lr=1e-3,
    max_grad_norm=1.0,
    extra=(),
):
    """A copy of `model` after one policy_update on the random batch; its .grad holds the last
    minibatch's accumulated (clipped) gradient."""
    cfg = load_config(
        None,
        [
            f"train.micro_batch_size={micro_batch_size}",
            f"algo.ppo_epochs={epochs}",
            f"algo.minibatches={minibatches}",
            "rollout.batch_size=8",
            "rollout.group_size=4",
            f"train.max_grad_norm={max_grad_norm}",
            *extra,
        ],
    )
    model = copy.deepcopy(model).train()
    optimizers = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    optimizer = optimizers[optimizer](model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    batch = random_batch(tokenizer)
    advantages = (batch.rewards - 0.5)[:, None] * batch.loss_mask
    with torch.no_grad():
        old = batch_logprobs(model, batch, 8, 1.0)
    data = UpdateInputs(batch, advantages, old, None)
    result = policy_update(
        model, optimizer, scheduler, data, cfg, ppo_clip, None, torch.Generator().manual_seed(0)
    )
    return model, result


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


# Micro-batching changes only the order of float32 sums. Each sum's rounding error is a few
# float32 epsilons (1.2e-7) of its magnitude, so the gradients of two orders agree to ~1e-8 of
# the gradient's norm (measured: 1.5e-8); 1e-6 leaves a wide margin and still catches any
# mis-scaled micro-batch, which is off by a share of the norm.
GRAD_RTOL = 1e-6


def test_micro_batching_does_not_change_the_accumulated_gradient(tiny_model, tokenizer):
    # no clipping: it would rescale a mis-scaled gradient back to the same norm
    one_step = dict(epochs=1, minibatches=1, optimizer="sgd", lr=0.0, max_grad_norm=1e9)
    whole, r1 = run_update(tiny_model, tokenizer, micro_batch_size=4, **one_step)
    split, r2 = run_update(tiny_model, tokenizer, micro_batch_size=1, **one_step)
    assert abs(r1.metrics["loss"] - r2.metrics["loss"]) < 1e-6
    g_whole = flat(p.grad for p in whole.parameters())
    g_split = flat(p.grad for p in split.parameters())
    assert g_whole.norm() > 0.1  # a real gradient, not a vacuous comparison of zeros
    assert (g_whole - g_split).abs().max() <= GRAD_RTOL * g_whole.norm()


def test_micro_batching_does_not_change_an_sgd_update(tiny_model, tokenizer):
    """4 optimizer steps (2 epochs x 2 minibatches). SGD is linear in the gradient, so each
    step adds at most lr * GRAD_RTOL * |g| (|g| <= max_grad_norm = 1) of difference; the
    later steps' gradients, taken at weights that differ by that much, add the same order
    again. Bound: 4 steps x lr x 1e-6, doubled."""
    lr = 0.1
    whole, r1 = run_update(tiny_model, tokenizer, micro_batch_size=4, optimizer="sgd", lr=lr)
    split, r2 = run_update(tiny_model, tokenizer, micro_batch_size=1, optimizer="sgd", lr=lr)
    assert abs(r1.metrics["loss"] - r2.metrics["loss"]) < 1e-6
    w_whole, w_split, w0 = (flat(m.parameters()) for m in (whole, split, tiny_model))
    assert (w_whole - w_split).abs().max() <= 2 * 4 * lr * GRAD_RTOL
    assert (w_whole - w0).abs().max() > 1e-4  # the update really moved the weights


def test_micro_batching_does_not_change_an_adam_update_where_the_gradient_is_signal(
    tiny_model, tokenizer
):
    """Adam's first step moves each weight by lr * g / (|g| + eps): an entry whose gradient is
    float32 noise moves by up to lr either way, so only entries well above the noise
    (|g| > 1e-4 |g|_2, 100x GRAD_RTOL) are compared; their relative gradient error is at most
    1e-2, hence a step difference below lr * 1e-2."""
    lr = 1e-3
    one_step = dict(epochs=1, minibatches=1, optimizer="adamw", lr=lr)
    whole, _ = run_update(tiny_model, tokenizer, micro_batch_size=4, **one_step)
    split, _ = run_update(tiny_model, tokenizer, micro_batch_size=1, **one_step)
    g = flat(p.grad for p in whole.parameters())
    signal = g.abs() > 1e-4 * g.norm()
    assert signal.float().mean() > 0.5  # most entries are compared, not a chosen few
    w_whole, w_split, w0 = (flat(m.parameters()) for m in (whole, split, tiny_model))
    assert (w_whole - w_split)[signal].abs().max() <= lr * 1e-2
    assert (w_whole - w0)[signal].abs().min() > lr / 2  # each compared entry moved ~lr


def test_update_raises_the_logprob_of_positive_advantage_replies(tiny_model, tokenizer):
    batch = random_batch(tokenizer)
    before = batch_logprobs(tiny_model, batch, 8, 1.0)
    model, _ = run_update(tiny_model, tokenizer, micro_batch_size=8, epochs=1, minibatches=1)
    after = batch_logprobs(model, batch, 8, 1.0)
    per_seq = ((after - before) * batch.loss_mask).sum(-1)
    assert per_seq[batch.rewards == 1].mean() > 0 > per_seq[batch.rewards == 0].mean()


def test_entropy_bonus_raises_entropy(tiny_model, tokenizer):
    from rlvr.train.update import micro_logprobs

    batch = random_batch(tokenizer)
    zero_adv = torch.zeros_like(batch.loss_mask)

    def entropy_after(coef):
        cfg = load_config(
            None, [f"algo.entropy_coef={coef}", "rollout.batch_size=8", "rollout.group_size=4"]
        )
        model = copy.deepcopy(tiny_model).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        old = batch_logprobs(model, batch, 8, 1.0)
        data = UpdateInputs(batch, zero_adv, old, None)
        policy_update(model, optimizer, scheduler, data, cfg, ppo_clip, None, torch.Generator())
        with torch.no_grad():
            _, entropy = micro_logprobs(model, batch, torch.arange(8), 1.0, None, with_entropy=True)
        return float((entropy * batch.loss_mask).sum())

    assert entropy_after(0.0) == entropy_after(0.0)
    assert entropy_after(1.0) > entropy_after(0.0) + 1e-4


def test_micro_batch_1x8_equals_8x1_over_20_steps(fast_overrides, monkeypatch):
    """The whole loop, 20 RL steps: accumulation of 8 micro-batches of 1 vs one of 8."""
    from rlvr.rewards import REWARDS
    from rlvr.train.trainer import Trainer
    from rlvr.types import Score

    monkeypatch.setitem(REWARDS, "parity", lambda p, r: Score(float(len(r) % 2), "ok"))
    common = fast_overrides + [
        "rollout.batch_size=8", "train.steps=20", "train.eval_every=0", "train.save_every=0",
        "task.rewards={parity: 1.0}", "train.lr=1e-3",
    ]  # fmt: skip
    losses = {}
    for micro in (1, 8):
        trainer = Trainer(
            load_config(None, common + [f"train.micro_batch_size={micro}", f"log.name=m{micro}"])
        )
        trainer.run()
        losses[micro] = [r["loss"] for r in trainer.run_dir.read_metrics() if "loss" in r]
    assert len(losses[1]) == len(losses[8]) == 20
    assert max(abs(a - b) for a, b in zip(losses[1], losses[8])) < 1e-5
    assert len({round(x, 6) for x in losses[8]}) > 1  # the loss really changes from step to step


def test_a_single_pass_update_measures_the_engine_mismatch_for_free(tiny_model, tokenizer):
    cfg = load_config(None, ["train.micro_batch_size=2", "rollout.batch_size=8"])
    batch = random_batch(tokenizer)
    with torch.no_grad():
        exact = batch_logprobs(tiny_model, batch, 8, 1.0)
    # the engine's logprobs off by 0.1 on every other policy token
    shift = torch.zeros_like(exact)
    shift[:, ::2] = 0.1
    batch.behaviour_logprobs = (exact + shift) * batch.loss_mask
    model = copy.deepcopy(tiny_model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    data = UpdateInputs(batch, batch.loss_mask.clone(), None, None)
    result = policy_update(
        model, optimizer, scheduler, data, cfg, ppo_clip, None, torch.Generator()
    )
    on = batch.loss_mask.bool()
    expected_mean = float(shift[on].mean())
    assert abs(result.metrics["mismatch/abs_diff_mean"] - expected_mean) < 1e-5
    assert abs(result.metrics["mismatch/abs_diff_max"] - 0.1) < 1e-5
    assert abs(result.metrics["mismatch/ratio_p05"] - torch.tensor(-0.1).exp().item()) < 1e-5


def test_seq_mean_aggregations_count_fully_masked_rows_unless_told_not_to():
    from rlvr.config import AlgoConfig
    from rlvr.train.update import normalisers

    mask = torch.tensor([[1.0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]])  # two rows are empty
    assert normalisers(mask, AlgoConfig()) == (3.0, 4)
    assert normalisers(mask, AlgoConfig(seq_mean_count_empty=False)) == (3.0, 2)
    assert normalisers(torch.zeros(2, 3), AlgoConfig(seq_mean_count_empty=False)) == (0.0, 0)


def test_sum_pi_squared_comes_from_the_same_forward_as_the_logprobs(tiny_model, tokenizer):
    batch = random_batch(tokenizer)
    squares = torch.zeros_like(batch.loss_mask)
    logprobs = batch_logprobs(tiny_model, batch, 3, 0.7, sum_pi_squared=squares)
    assert torch.equal(logprobs, batch_logprobs(tiny_model, batch, 3, 0.7))
    with torch.no_grad():
        out = tiny_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    want = (out.logits[:, :-1].float() / 0.7).softmax(-1).square().sum(-1)
    real = batch.attention_mask[:, 1:].bool()  # right padding: a row ends at its last token
    assert torch.allclose(squares[real], want[real], atol=1e-5)


def test_the_kl_term_gets_the_algo_config(tiny_model, tokenizer):
    """kl_clamp reaches k3 through the update: a clamp of 1e-9 leaves the KL term at (at most)
    1e-9 per token, while the unclamped k3 of a shifted reference is far larger."""
    from rlvr.algos.kl import k3
    from rlvr.train.update import micro_batch_loss

    batch = random_batch(tokenizer)
    ref = batch_logprobs(tiny_model, batch, 8, 1.0) - 1.0  # k3 = e^-1 - 1 + 1 per token
    data = UpdateInputs(batch, torch.zeros_like(batch.loss_mask), None, ref, kl_coef=1.0)
    rows = torch.arange(len(batch))
    kls = {}
    for clamp in ("null", "1e-9"):
        cfg = load_config(None, [f"algo.kl_clamp={clamp}", "algo.kl_coef=1.0"])
        _, metrics = micro_batch_loss(
            tiny_model, data, rows, len(batch), float(batch.loss_mask.sum()), cfg, ppo_clip, k3
        )
        kls[clamp] = metrics["kl"]
    assert abs(kls["null"] - math.exp(-1)) < 1e-4 and kls["1e-9"] <= 1e-9


def test_bf16_autocast_keeps_the_update_close_to_float32_but_runs_in_bf16(tiny_model, tokenizer):
    full, _ = run_update(tiny_model, tokenizer, 8, epochs=1, minibatches=1, optimizer="sgd")
    half, _ = run_update(
        tiny_model, tokenizer, 8, epochs=1, minibatches=1, optimizer="sgd",
        extra=["train.autocast=bfloat16"],
    )  # fmt: skip
    g32, g16 = flat(p.grad for p in full.parameters()), flat(p.grad for p in half.parameters())
    # bf16 keeps 8 mantissa bits: the gradient moves by about 1% of its norm, far above the
    # float32 rounding of the micro-batch tests (1e-8) and far below a wrong update
    relative = float((g16 - g32).norm() / g32.norm())
    assert 1e-4 < relative < 0.1
    assert all(p.dtype == torch.float32 for p in half.parameters())


def test_imitation_adds_its_coef_times_the_mean_reply_nll_to_the_step(tiny_model, tokenizer):
    # the imitation term alone (zero advantages): its gradient, over two micro-batches of 4 and 2 rows,
    # must be that of coef x the mean NLL of every reply token computed in one plain forward
    cfg = load_config(None, [
        "train.micro_batch_size=4", "algo.minibatches=1", "rollout.batch_size=8",
        "rollout.group_size=4", "train.max_grad_norm=1e9",
    ])  # fmt: skip
    batch, imitation = random_batch(tokenizer), random_batch(tokenizer, size=6, seed=1)
    model = copy.deepcopy(tiny_model).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    term = Imitation(imitation, 0.5, "imitation_nll")
    data = UpdateInputs(batch, torch.zeros_like(batch.loss_mask), None, None, imitation=term)
    result = policy_update(
        model, optimizer, scheduler, data, cfg, ppo_clip, None, torch.Generator().manual_seed(0)
    )
    reference = copy.deepcopy(tiny_model).train()
    ids, mask = imitation.input_ids, imitation.loss_mask
    logits = reference(input_ids=ids, attention_mask=imitation.attention_mask).logits
    chosen = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    nll = -(chosen * mask).sum() / mask.sum()
    (0.5 * nll).backward()
    assert result.metrics["imitation_nll"] == pytest.approx(nll.item(), rel=1e-5)
    got = flat(p.grad for p in model.parameters())
    want = flat(p.grad for p in reference.parameters())
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-7)


class RowCounter:
    """Counts the rows the model runs forward on."""

    def __init__(self, model):
        self.rows = 0
        model.register_forward_pre_hook(self.count, with_kwargs=True)

    def count(self, module, args, kwargs):
        self.rows += len(kwargs["input_ids"])


def skip_update(model, tokenizer, advantages, overrides=(), loss=ppo_clip, kl_fn=None,
                optimizer="sgd", lr=0.0, epochs=1, minibatches=1):  # fmt: skip
    """A copy of `model` after one policy_update on the random batch with these advantages
    [B] (broadcast over each reply), its result, and how many rows it ran forward. With
    `kl_fn` the loss has a KL term to a reference whose logprobs are all -1."""
    cfg = load_config(
        None, ["rollout.batch_size=8", "rollout.group_size=4", "train.micro_batch_size=8",
               "train.max_grad_norm=1e9", f"algo.ppo_epochs={epochs}",
               f"algo.minibatches={minibatches}", *overrides],
    )  # fmt: skip
    model = copy.deepcopy(model).train()
    counter = RowCounter(model)
    opt = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer](model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    batch = random_batch(tokenizer)
    ref = None if kl_fn is None else torch.full_like(batch.loss_mask, -1.0)
    data = UpdateInputs(batch, advantages[:, None] * batch.loss_mask, None, ref, kl_coef=0.1)
    generator = torch.Generator().manual_seed(0)
    result = policy_update(model, opt, scheduler, data, cfg, loss, kl_fn, generator)
    return model, result, counter.rows


# group 0 (rows 0-3) scored alike, group 1 did not
HALF_INERT = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.5, -0.5, 1.5, -1.5])


def test_skipping_zero_advantage_rows_leaves_the_gradient_as_it_was(tiny_model, tokenizer):
    on, r_on, rows_on = skip_update(tiny_model, tokenizer, HALF_INERT)
    off, r_off, rows_off = skip_update(
        tiny_model, tokenizer, HALF_INERT, ["train.skip_zero_advantage=false"]
    )
    assert (rows_on, rows_off) == (4, 8)
    assert r_on.metrics["skipped_rows"] == 0.5 and "skipped_rows" not in r_off.metrics
    assert r_on.trained.tolist() == [4, 5, 6, 7] and r_off.trained is None
    assert abs(r_on.metrics["loss"] - r_off.metrics["loss"]) < 1e-6
    g_on, g_off = (flat(p.grad for p in m.parameters()) for m in (on, off))
    assert g_off.norm() > 0.1
    assert (g_on - g_off).abs().max() <= GRAD_RTOL * g_off.norm()


def test_an_all_inert_minibatch_still_takes_its_adam_step(tiny_model, tokenizer):
    """Two minibatches, the second all inert: without skipping Adam steps there on a zero
    gradient and its momentum moves the weights, so skipping must keep that step (on one row)."""
    second = torch.randperm(8, generator=torch.Generator().manual_seed(0)).chunk(2)[1]
    advantages = torch.tensor([1.0, -1.0] * 4)
    advantages[second] = 0.0
    common = dict(optimizer="adamw", lr=1e-3, minibatches=2)
    on, _, rows_on = skip_update(tiny_model, tokenizer, advantages, **common)
    off, _, rows_off = skip_update(
        tiny_model, tokenizer, advantages, ["train.skip_zero_advantage=false"], **common
    )
    assert rows_on < rows_off
    w_on, w_off = flat(on.parameters()), flat(off.parameters())
    assert torch.equal(w_on, w_off)  # the skipped rows' gradients are exact zeros


@pytest.mark.parametrize(
    "case", ["entropy_bonus", "kl_in_loss", "loss_not_advantage_weighted", "switched_off"]
)
def test_rows_are_not_skipped_where_another_term_reads_them(tiny_model, tokenizer, case):
    from rlvr.algos.kl import k3
    from rlvr.algos.losses import LOSSES
    from rlvr.registry import bind_params

    dro = bind_params(LOSSES["dro"], LOSSES["dro"].Params())
    kw = {
        "entropy_bonus": dict(overrides=["algo.entropy_coef=0.01"]),
        "kl_in_loss": dict(kl_fn=k3),
        "loss_not_advantage_weighted": dict(loss=dro),
        "switched_off": dict(overrides=["train.skip_zero_advantage=false"]),
    }[case]
    _, result, rows = skip_update(tiny_model, tokenizer, HALF_INERT, **kw)
    assert rows == 8 and "skipped_rows" not in result.metrics


def test_with_rows_skipped_entropy_is_the_mean_over_the_rows_trained(tiny_model, tokenizer):
    from rlvr.train.update import micro_logprobs

    _, result, _ = skip_update(tiny_model, tokenizer, HALF_INERT)
    batch, trained = random_batch(tokenizer), torch.arange(4, 8)
    with torch.no_grad():
        _, entropy = micro_logprobs(tiny_model, batch, trained, 1.0, None, with_entropy=True)
    mask = batch.loss_mask[trained, : entropy.shape[1]]
    assert abs(result.metrics["entropy"] - float((entropy * mask).sum() / mask.sum())) < 1e-5
