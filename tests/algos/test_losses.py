import dataclasses
import math

import pytest
import torch

from rlvr.algos.losses import AGGREGATIONS, LOSSES, LossInputs, ppo_clip
from rlvr.config import AlgoConfig
from rlvr.registry import bind_params

ALGO = AlgoConfig(clip_low=0.2, clip_high=0.28)


def run(name, inputs, algo, **settings):
    """LOSSES[name](inputs, algo) with its Params bound as build_components binds
    algo.loss_params: `settings` where it declares them, its defaults elsewhere. A setting the
    loss does not declare is left out, so one call can set dual_clip's c for every loss."""
    fn = LOSSES[name]
    if hasattr(fn, "Params"):
        own = {k: v for k, v in settings.items() if k in fn.Params.model_fields}
        fn = bind_params(fn, fn.Params(**own))
    return fn(inputs, algo)


# (advantage, ratio, expected per-token loss, clipped?) with bounds [0.8, 1.28]
CASES = [
    (1.0, 1.10, -1.10, False),  # inside
    (1.0, 1.50, -1.28, True),  # A>0 above 1+clip_high: clipped
    (1.0, 0.50, -0.50, False),  # A>0 below 1-clip_low: pessimistic min keeps the ratio
    (-1.0, 0.50, 0.80, True),  # A<0 below 1-clip_low: clipped
    (-1.0, 1.50, 1.50, False),  # A<0 above 1+clip_high: unclipped
    (-2.0, 0.90, 1.80, False),  # inside
    (1.0, 1.25, -1.25, False),  # inside only because clip_high=0.28 (would clip at 0.2)
    (-1.0, 0.78, 0.80, True),  # clipped only because clip_low=0.2 (would pass at 0.28)
]
# sum = -1.1 - 1.28 - 0.5 + 0.8 + 1.5 + 1.8 - 1.25 + 0.8 = 0.77 over 8 tokens


def golden_inputs():
    adv = torch.zeros(2, 5, dtype=torch.float64)
    ratio = torch.ones(2, 5, dtype=torch.float64)
    mask = torch.zeros(2, 5, dtype=torch.float64)
    slots = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3), (1, 4)]
    for (a, r, _, _), (i, j) in zip(CASES, slots):
        adv[i, j], ratio[i, j], mask[i, j] = a, r, 1.0
    adv[0, 4], ratio[0, 4] = 100.0, 50.0  # masked out
    adv[1, 0], ratio[1, 0] = -100.0, 0.01  # masked out
    old = torch.linspace(-3, -0.5, 10, dtype=torch.float64).reshape(2, 5)
    return LossInputs(old + ratio.log(), old, adv, mask, num_tokens=8.0, num_seqs=2)


def test_ppo_clip_golden():
    out = ppo_clip(golden_inputs(), ALGO)
    assert out.loss.item() == pytest.approx(sum(c[2] for c in CASES) / 8, abs=1e-9)
    assert out.loss.item() == pytest.approx(0.77 / 8, abs=1e-9)
    assert out.metrics["clip_frac"] == pytest.approx(3 / 8)
    # the lower clip binds on (-1, 0.5) and (-1, 0.78): A < 0 below 1 - clip_low
    assert out.metrics["clip_frac_lower"] == pytest.approx(2 / 8)


def test_ppo_kl_metric():
    x = golden_inputs()
    expected = -sum(math.log(c[1]) for c in CASES) / 8
    assert ppo_clip(x, ALGO).metrics["ppo_kl"] == pytest.approx(expected, abs=1e-9)


def test_token_mean_halves_sum_to_whole():
    x = golden_inputs()
    whole = ppo_clip(x, ALGO)
    halves = [
        ppo_clip(
            LossInputs(
                x.logprobs[i : i + 1],
                x.old_logprobs[i : i + 1],
                x.advantages[i : i + 1],
                x.loss_mask[i : i + 1],
                num_tokens=x.num_tokens,
                num_seqs=x.num_seqs,
            ),
            ALGO,
        )
        for i in range(2)
    ]
    assert (halves[0].loss + halves[1].loss).item() == pytest.approx(whole.loss.item(), abs=1e-12)
    for key in whole.metrics:
        assert halves[0].metrics[key] + halves[1].metrics[key] == pytest.approx(
            whole.metrics[key], abs=1e-12
        )


def test_gradcheck_away_from_clip_boundaries():
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=gen, dtype=torch.float64) * 3
    log_ratio = torch.tensor(
        [[0.05, -0.1, 0.6, -0.7], [0.0, 0.15, -0.05, 0.5], [-0.5, 0.1, 0.2, -0.15]],
        dtype=torch.float64,
    )
    adv = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 1], [1, 0, 1, 1]], dtype=torch.float64)
    logprobs = (old + log_ratio).requires_grad_()

    def f(lp):
        return ppo_clip(LossInputs(lp, old, adv, mask, num_tokens=10.0, num_seqs=3), ALGO).loss

    assert torch.autograd.gradcheck(f, (logprobs,))


def test_gradient_is_zero_where_clipped_and_masked():
    x = golden_inputs()
    logprobs = x.logprobs.clone().requires_grad_()
    ppo_clip(
        LossInputs(logprobs, x.old_logprobs, x.advantages, x.loss_mask, 8.0, 2), ALGO
    ).loss.backward()
    g = logprobs.grad
    assert g[0, 1] == 0 and g[0, 3] == 0 and g[1, 4] == 0  # clipped
    assert g[0, 4] == 0 and g[1, 0] == 0  # masked
    # inside the clip range d(-A*r)/dlogp = -A*r, divided by the 8 tokens
    assert g[0, 0].item() == pytest.approx(-1.1 / 8)
    assert g[1, 2].item() == pytest.approx(2 * 0.9 / 8)


def test_fully_masked_input_gives_zero_loss():
    logprobs = torch.randn(2, 3, requires_grad=True)
    x = LossInputs(
        logprobs,
        torch.randn(2, 3),
        torch.randn(2, 3),
        torch.zeros(2, 3),
        num_tokens=0.0,
        num_seqs=2,
    )
    out = ppo_clip(x, AlgoConfig())
    assert torch.isfinite(out.loss) and out.loss.item() == 0.0
    out.loss.backward()
    assert torch.all(logprobs.grad == 0)
    assert out.metrics["clip_frac"] == 0.0


def test_registered():
    assert LOSSES["ppo_clip"] is ppo_clip


# ---- aggregations, the other losses, and properties every (loss, aggregation) pair keeps ----

LOSS_NAMES = list(LOSSES)
AGG_NAMES = list(AGGREGATIONS)
# rank tokens by a covariance over the micro-batch (as the paper's code): not additive
MICRO_BATCH_DEPENDENT = {"kl_cov", "clip_cov"}
# losses with a ratio clip or trust region: they report where its lower side binds
CLIPPING = [
    "ppo_clip",
    "dual_clip",
    "up",
    "gspo",
    "gmpo",
    "cispo",
    "dis",
    "dppo_tv",
    "dppo_kl",
    "clip_cov",
]


def make(adv, ratio, logp=None, mask=None, norm_constant=1.0) -> LossInputs:
    """Float64 inputs from nested lists; old logprobs are chosen so that pi / pi_old = ratio."""
    adv = torch.tensor(adv, dtype=torch.float64)
    ratio = torch.tensor(ratio, dtype=torch.float64)
    if logp is None:
        logp = -1.0 - 0.1 * torch.arange(adv.numel(), dtype=torch.float64).reshape(adv.shape)
    logp = torch.as_tensor(logp, dtype=torch.float64)
    mask = torch.ones_like(adv) if mask is None else torch.tensor(mask, dtype=torch.float64)
    return LossInputs(
        logp,
        logp - ratio.log(),
        adv,
        mask,
        num_tokens=float(mask.sum()),
        num_seqs=adv.shape[0],
        norm_constant=norm_constant,
    )


def test_aggregations_golden():
    values = torch.tensor([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=torch.float64)
    x = LossInputs(values, values, values, mask, num_tokens=5.0, num_seqs=3, norm_constant=4.0)
    # row sums over policy tokens: 1+2 = 3, 4+5+6 = 15, 0 (empty row); lengths 2, 3, 0
    expected = {
        "token-mean": (3 + 15) / 5,  # 3.6
        "token-sum": 3 + 15,
        "seq-mean-token-sum": (3 + 15 + 0) / 3,  # 6
        "seq-mean-token-mean": (3 / 2 + 15 / 3 + 0) / 3,  # 6.5 / 3
        "seq-mean-token-sum-norm": (3 / 4 + 15 / 4 + 0) / 3,  # 1.5
    }
    assert set(expected) == set(AGGREGATIONS)
    for name, value in expected.items():
        assert AGGREGATIONS[name](values, x).item() == pytest.approx(value, abs=1e-12), name


def ragged_batch(seed=0):
    """Five rows of lengths 4, 1, 0, 6, 3 (one empty) in width 6, with random log-ratios."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([4, 1, 0, 6, 3])
    mask = (torch.arange(6) < lengths[:, None]).double()
    old = -torch.rand(5, 6, generator=gen, dtype=torch.float64) * 3
    logp = old + 0.4 * torch.randn(5, 6, generator=gen, dtype=torch.float64)
    adv = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    normaliser = 2 + torch.rand(5, 6, generator=gen, dtype=torch.float64)  # soft_q's fields
    ref_logprobs = old + 0.3 * torch.randn(5, 6, generator=gen, dtype=torch.float64)
    ref_normaliser = normaliser + 0.2 * torch.randn(5, 6, generator=gen, dtype=torch.float64)
    return LossInputs(
        logp, old, adv, mask, float(mask.sum()), 5, norm_constant=6.0, behaviour_logprobs=old,
        normaliser=normaliser, ref_logprobs=ref_logprobs, ref_normaliser=ref_normaliser,
    )  # fmt: skip


def micro_batches(x: LossInputs, splits=((0, 2), (2, 5))):
    """Row slices as update.py builds them: trimmed to their longest row, minibatch normalisers."""
    for lo, hi in splits:
        width = max(int(x.loss_mask[lo:hi].sum(-1).max()), 1)
        yield LossInputs(**{
            f.name: v[lo:hi, :width] if isinstance(v, torch.Tensor) else v
            for f in dataclasses.fields(x)
            for v in [getattr(x, f.name)]
        })  # fmt: skip


@pytest.mark.parametrize("agg", AGG_NAMES)
def test_aggregation_micro_batches_sum_to_whole(agg):
    x = ragged_batch()
    fn = AGGREGATIONS[agg]
    whole = fn(x.advantages, x)
    parts = sum(fn(m.advantages, m) for m in micro_batches(x))
    assert parts.item() == pytest.approx(whole.item(), abs=1e-12)


@pytest.mark.parametrize("agg", AGG_NAMES)
@pytest.mark.parametrize("loss", sorted(set(LOSS_NAMES) - MICRO_BATCH_DEPENDENT))
def test_loss_micro_batches_sum_to_whole(loss, agg):
    algo = AlgoConfig(loss_agg=agg, clip_low=0.2, clip_high=0.28)
    x = ragged_batch()
    whole = run(loss, x, algo, c=1.5)
    parts = [run(loss, m, algo, c=1.5) for m in micro_batches(x)]
    assert sum(p.loss for p in parts).item() == pytest.approx(whole.loss.item(), abs=1e-12)
    for key, value in whole.metrics.items():
        assert sum(p.metrics[key] for p in parts) == pytest.approx(value, abs=1e-12), key


def test_dual_clip_golden():
    # bounds [0.8, 1.28], c = 3; per token max(-A r, -A clip(r)), then min(., 3|A|) where A < 0
    x = make(adv=[[-1.0, -1.0, 1.0, -2.0]], ratio=[[4.0, 2.0, 4.0, 0.5]])
    # A=-1 r=4: max(4, 1.28) = 4 -> capped at 3 (dual bound binds)
    # A=-1 r=2: max(2, 1.28) = 2 < 3
    # A=+1 r=4: max(-4, -1.28) = -1.28 (clip binds; the cap only concerns A < 0)
    # A=-2 r=0.5: max(1.0, 1.6) = 1.6 < 6 (clip binds)
    out = run("dual_clip", x, ALGO)
    assert out.loss.item() == pytest.approx((3 + 2 - 1.28 + 1.6) / 4, abs=1e-12)  # 1.33
    assert out.metrics["clip_frac"] == pytest.approx(2 / 4)
    assert out.metrics["dual_clip_frac"] == pytest.approx(1 / 4)  # the capped A=-1 r=4
    assert out.metrics["clip_frac_lower"] == pytest.approx(1 / 4)  # A=-2 r=0.5 below 0.8
    # plain ppo_clip differs only on the capped token: (4 + 2 - 1.28 + 1.6) / 4
    assert ppo_clip(x, ALGO).loss.item() == pytest.approx(6.32 / 4, abs=1e-12)


def test_up_golden_loss_and_gradients():
    # bounds [0.8, 1.28], c = 3
    x = make(adv=[[1.0, -1.0, -1.0, -2.0]], ratio=[[1.5, 0.5, 4.0, 1.1]])
    x.logprobs.requires_grad_()
    # A=+1 r=1.5: -A * pi/sg(pi) = -1 (ppo_clip would clip at 1.28); gradient -A = -1
    # A=-1 r=0.5: max(0.5, 0.8) = 0.8, the lower clip binds; gradient 0
    # A=-1 r=4:   max(4, 1.28) = 4, capped at c |A| = 3; gradient 0
    # A=-2 r=1.1: inside, -A r = 2.2; gradient -A r = 2.2
    out = run("up", x, ALGO)
    assert out.loss.item() == pytest.approx((-1 + 0.8 + 3 + 2.2) / 4, abs=1e-12)  # 1.25
    out.loss.backward()
    expected = torch.tensor([[-1.0, 0.0, 0.0, 2.2]], dtype=torch.float64) / 4
    assert torch.allclose(x.logprobs.grad, expected, atol=1e-12)
    assert out.metrics["clip_frac"] == pytest.approx(1 / 4)  # the A > 0 token is not clipped
    assert out.metrics["clip_frac_lower"] == pytest.approx(1 / 4)
    assert out.metrics["dual_clip_frac"] == pytest.approx(1 / 4)
    kl = -sum(math.log(r) for r in (1.5, 0.5, 4.0, 1.1)) / 4
    assert out.metrics["ppo_kl"] == pytest.approx(kl, abs=1e-12)
    # dual_clip differs only on the positive token, which its upper clip holds at -1.28
    assert run("dual_clip", x, ALGO).loss.item() == pytest.approx(4.72 / 4, abs=1e-12)


@pytest.mark.parametrize("agg", AGG_NAMES)
def test_up_gradient_is_reinforce_above_zero_and_dual_clip_below(agg):
    x = ragged_batch(seed=3)
    algo = AlgoConfig(loss_agg=agg)

    def grad(loss):
        logp = x.logprobs.clone().requires_grad_()
        inputs = LossInputs(
            logp, x.old_logprobs, x.advantages, x.loss_mask, x.num_tokens, 5, norm_constant=6.0
        )
        run(loss, inputs, algo, c=1.5).loss.backward()
        return logp.grad

    positive = x.advantages > 0
    expected = torch.where(positive, grad("reinforce"), grad("dual_clip"))
    assert positive[x.loss_mask.bool()].any() and (~positive)[x.loss_mask.bool()].any()
    assert torch.allclose(grad("up"), expected, atol=1e-12)


def test_gspo_golden():
    algo = AlgoConfig(clip_low=0.05, clip_high=0.1)  # bounds [0.95, 1.1]
    x = make(
        adv=[[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]],
        ratio=[[math.exp(0.1), math.exp(-0.3), math.exp(0.5)], [math.exp(0.2), math.exp(0.4), 50]],
        mask=[[1, 1, 1], [1, 1, 0]],
    )
    # row 0: log s = (0.1 - 0.3 + 0.5) / 3 = 0.1, s = 1.1051709; A = 1 -> max(-1.105, -1.1) = -1.1
    # row 1: log s = (0.2 + 0.4) / 2 = 0.3 (masked 50 ignored), s = 1.3498588; A = -2
    #        -> max(2 * 1.3498588, 2 * 1.1) = 2.6997176
    s1 = math.exp(0.3)
    out = run("gspo", x, algo)
    assert out.loss.item() == pytest.approx((3 * -1.1 + 2 * 2 * s1) / 5, abs=1e-9)  # 0.4198870
    assert out.metrics["clip_frac"] == pytest.approx(3 / 5)
    seq = AlgoConfig(clip_low=0.05, clip_high=0.1, loss_agg="seq-mean-token-mean")
    assert run("gspo", x, seq).loss.item() == pytest.approx((-1.1 + 2 * s1) / 2, abs=1e-9)


def test_gspo_matches_loop_reference():
    x = ragged_batch(seed=3)
    algo = AlgoConfig(clip_low=10.0, clip_high=10.0)  # never clips: loss = sum -A s_i / N
    logp = x.logprobs.clone().requires_grad_()
    out = run("gspo", LossInputs(logp, x.old_logprobs, x.advantages, x.loss_mask, 19.0, 5), algo)
    out.loss.backward()
    loss, grad = 0.0, torch.zeros_like(logp)
    for i in range(5):
        tokens = [t for t in range(6) if x.loss_mask[i, t] == 1]
        if not tokens:
            continue
        log_s = sum(float(x.logprobs[i, t] - x.old_logprobs[i, t]) for t in tokens) / len(tokens)
        for t in tokens:
            loss += -float(x.advantages[i, t]) * math.exp(log_s) / 19
            grad[i, t] = -float(x.advantages[i, t]) * math.exp(log_s) / 19  # sg on s_i
    assert out.loss.item() == pytest.approx(loss, abs=1e-12)
    assert torch.allclose(logp.grad, grad, atol=1e-12)


def test_cispo_golden():
    algo = AlgoConfig(clip_low=1.0, clip_high=0.5)  # weight in [0, 1.5]: no lower clip
    x = make(adv=[[1.0, -1.0, 2.0]], ratio=[[2.0, 0.25, 1.0]], logp=[[-0.5, -2.0, -1.0]])
    # -sg(w) A logp: w=1.5 -> -1.5*1*-0.5 = 0.75; w=0.25 -> -0.25*-1*-2 = -0.5; w=1 -> 2
    out = run("cispo", x, algo)
    assert out.loss.item() == pytest.approx((0.75 - 0.5 + 2) / 3, abs=1e-12)
    assert out.metrics["clip_frac"] == pytest.approx(1 / 3)
    # with the default clip_low=0.2 the second weight is raised to 0.8: -0.8*-1*-2 = -1.6
    low = AlgoConfig(clip_low=0.2, clip_high=0.5)
    assert run("cispo", x, low).loss.item() == pytest.approx((0.75 - 1.6 + 2) / 3, abs=1e-12)


def sapo_inputs():
    return make(adv=[[1.0, -1.0, 1.0, -2.0, 0.0]], ratio=[[1.0, 1.0, 2.0, 0.5, 3.0]])


def test_sapo_golden():
    x = sapo_inputs()
    # f(r) = sigmoid(tau (r - 1)) * 4 / tau, loss = -f(r) A
    # A=+1 r=1:   tau=1,    f = 0.5 * 4 = 2                           -> -2
    # A=-1 r=1:   tau=1.05, f = 0.5 * 4 / 1.05 = 1.9047619            -> +1.9047619
    # A=+1 r=2:   tau=1,    f = sigmoid(1) * 4 = 0.7310586 * 4 = 2.9242343  -> -2.9242343
    # A=-2 r=0.5: tau=1.05, f = sigmoid(-0.525) * 4 / 1.05 = 0.3716852 * 3.8095238 = 1.4159383
    #             -> +2.8318767
    # A=0 r=3:    0
    expected = (-2 + 2 / 1.05 - 4 / (1 + math.exp(-1)) + 2 * 4 / 1.05 / (1 + math.exp(0.525))) / 5
    assert expected == pytest.approx((-2 + 1.9047619 - 2.9242343 + 2.8318767) / 5, abs=1e-7)
    got = run("sapo", x, AlgoConfig(), tau_pos=1.0, tau_neg=1.05).loss.item()
    assert got == pytest.approx(expected, abs=1e-12)
    assert run("sapo", x, AlgoConfig()).loss.item() == got  # those are its defaults


def test_sapo_computes_with_the_temperatures_it_is_given():
    # tau_pos 2, tau_neg 0.5 on sapo_inputs' tokens, f(r) = sigmoid(tau (r - 1)) * 4 / tau:
    # A=+1 r=1: f = 0.5 * 4 / 2 = 1 -> -1;         A=-1 r=1: f = 0.5 * 4 / 0.5 = 4 -> +4
    # A=+1 r=2: f = sigmoid(2) * 2 -> -2 sigmoid(2); A=-2 r=0.5: f = sigmoid(-0.25) * 8
    # -> +16 sigmoid(-0.25); A=0: 0
    def sigmoid(v):
        return 1 / (1 + math.exp(-v))

    expected = (-1 + 4 - 2 * sigmoid(2) + 16 * sigmoid(-0.25)) / 5
    out = run("sapo", sapo_inputs(), AlgoConfig(), tau_pos=2.0, tau_neg=0.5)
    assert out.loss.item() == pytest.approx(expected, abs=1e-12)
    assert out.loss.item() != pytest.approx(run("sapo", sapo_inputs(), AlgoConfig()).loss.item())


def test_reinforce_golden_ignores_old_logprobs():
    x = make(adv=[[1.0, -2.0]], ratio=[[7.0, 0.01]], logp=[[-0.5, -1.0]])  # ratios are ignored
    # -A logp: -1 * -0.5 = 0.5; 2 * -1 = -2; token mean (0.5 - 2) / 2 = -0.75
    assert run("reinforce", x, ALGO).loss.item() == pytest.approx(-0.75, abs=1e-12)


# up's self-anchored ratio pi / sg(pi) is 1 whatever pi is: finite differences see no gradient
# there by design (test_up_gradient_is_reinforce_above_zero_and_dual_clip_below checks it)
@pytest.mark.parametrize("agg", AGG_NAMES)
@pytest.mark.parametrize("loss", sorted(set(LOSS_NAMES) - {"up"}))
def test_gradcheck_every_loss(loss, agg):
    # log-ratios away from the clip edges of [0.8, 1.28]; one advantage per sequence (GSPO's
    # stop-gradient form is the exact gradient only then); sequence means -0.04, 0.22, -0.15
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=gen, dtype=torch.float64) * 3 - 0.1
    log_ratio = torch.tensor(
        [[0.05, -0.1, 0.6, -0.7], [0.0, 0.15, -0.05, 0.5], [-0.5, 0.1, 0.2, -0.15]],
        dtype=torch.float64,
    )
    adv = torch.tensor([[0.7], [-1.3], [-0.4]], dtype=torch.float64).expand(3, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 1], [1, 0, 1, 1]], dtype=torch.float64)
    algo = AlgoConfig(loss_agg=agg, clip_low=0.2, clip_high=0.28)

    def f(lp):
        # cispo's, dis's and dppo's weights are sg(f(r)): finite differences would see r move,
        # autograd not. Moving old with logprobs holds r fixed, so both see only -w A log pi.
        base = lp.detach() - log_ratio if loss in ("cispo", "dis", "dppo_tv", "dppo_kl") else old
        torch.manual_seed(0)  # clip_cov draws its dropped tokens: the same draw every call
        x = LossInputs(
            lp, base, adv, mask, num_tokens=10.0, num_seqs=3, norm_constant=5.0,
            behaviour_logprobs=base, normaliser=2 - old, ref_logprobs=old, ref_normaliser=2 + old,
        )  # fmt: skip
        return run(loss, x, algo, c=1.5).loss

    assert torch.autograd.gradcheck(f, ((old + log_ratio).requires_grad_(),))


@pytest.mark.parametrize("agg", AGG_NAMES)
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_empty_response_gives_zero_loss(loss, agg):
    logprobs = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    old = torch.randn(2, 3).double()
    x = LossInputs(
        logprobs, old, torch.randn(2, 3).double(), zeros, 0.0, 2, behaviour_logprobs=old,
        normaliser=old + 3, ref_logprobs=old, ref_normaliser=old + 2,
    )  # fmt: skip
    out = run(loss, x, AlgoConfig(loss_agg=agg))
    assert torch.isfinite(out.loss) and out.loss.item() == 0.0
    out.loss.backward()
    assert torch.all(logprobs.grad == 0)
    assert all(value == 0.0 for value in out.metrics.values())


# gmpo's sequence ratio gives each token its sequence's mean advantage (its own golden test);
# clip_cov drops the gradient of a high-covariance token even at r = 1; soft_q is a regression
# on Bellman targets, not a policy gradient
@pytest.mark.parametrize("loss", sorted(set(LOSS_NAMES) - {"gmpo", "clip_cov", "soft_q"}))
def test_at_ratio_one_every_loss_is_the_policy_gradient(loss):
    # at r = 1 each loss has gradient -A / num_tokens per policy token under token-mean
    # (sapo too: d/dr [4/tau sigmoid(tau (r-1))] = 4 sigmoid'(0) = 1 at r = 1)
    x = ragged_batch(seed=1)
    logp = x.old_logprobs.clone().requires_grad_()
    inputs = LossInputs(
        logp, x.old_logprobs, x.advantages, x.loss_mask, x.num_tokens, 5,
        behaviour_logprobs=x.old_logprobs,
    )  # fmt: skip
    run(loss, inputs, AlgoConfig(clip_low=0.2, clip_high=0.28)).loss.backward()
    expected = -x.advantages * x.loss_mask / x.num_tokens
    assert torch.allclose(logp.grad, expected, atol=1e-12)


ADVANTAGE_WEIGHTED = sorted(n for n, fn in LOSSES.items() if getattr(fn, "advantage_weighted", 0))


def test_the_losses_an_update_may_skip_rows_for_are_the_advantage_weighted_ones():
    excluded = {"dro", "kl_cov", "clip_cov", "soft_q"}  # why: the comment on the flag's loop
    assert set(ADVANTAGE_WEIGHTED) == set(LOSS_NAMES) - excluded


@pytest.mark.parametrize("agg", AGG_NAMES)
@pytest.mark.parametrize("loss", ADVANTAGE_WEIGHTED)
def test_an_advantage_weighted_loss_gives_a_zero_advantage_row_no_gradient(loss, agg):
    """Away from ratio 1 and beside a row that does train: the update skips such a row on this
    promise (train.skip_zero_advantage), so any term that reads it breaks the skip's exactness."""
    gen = torch.Generator().manual_seed(3)
    old = -torch.rand(2, 5, generator=gen, dtype=torch.float64) * 3 - 0.1
    logp = (old + torch.randn(2, 5, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()
    adv = torch.tensor([[0.0], [1.3]], dtype=torch.float64).expand(2, 5)
    x = LossInputs(logp, old, adv, torch.ones(2, 5, dtype=torch.float64), 10.0, 2,
                   behaviour_logprobs=old)  # fmt: skip
    run(loss, x, AlgoConfig(loss_agg=agg, clip_low=0.2, clip_high=0.28)).loss.backward()
    assert torch.all(logp.grad[0] == 0)
    assert logp.grad[1].abs().sum() > 0  # a real gradient where the advantage is not 0


def test_every_loss_and_aggregation_has_a_docstring():
    for fn in [*LOSSES.values(), *AGGREGATIONS.values()]:
        assert fn.__doc__ and fn.__doc__.strip().splitlines()[0]


@pytest.mark.parametrize("agg", AGG_NAMES)
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_a_nan_at_padding_reaches_neither_the_loss_nor_the_gradient(loss, agg):
    x = ragged_batch(seed=2)
    pad = ~x.loss_mask.bool()
    algo = AlgoConfig(loss_agg=agg)

    def forward(poison):
        def fill(t):
            return torch.where(pad, float("nan"), t) if poison else t

        logp = fill(x.logprobs).requires_grad_()
        old = fill(x.old_logprobs)
        inputs = LossInputs(
            logp, old, fill(x.advantages), x.loss_mask, x.num_tokens, 5, norm_constant=6.0,
            behaviour_logprobs=old, normaliser=fill(x.normaliser),
            ref_logprobs=fill(x.ref_logprobs), ref_normaliser=fill(x.ref_normaliser),
        )  # fmt: skip
        torch.manual_seed(0)  # clip_cov's draw
        out = run(loss, inputs, algo)
        out.loss.backward()
        return out, logp.grad

    out, grad = forward(poison=True)
    clean, clean_grad = forward(poison=False)
    assert out.loss.item() == pytest.approx(clean.loss.item(), abs=1e-12)
    assert out.metrics == pytest.approx(clean.metrics, abs=1e-12)
    assert torch.isfinite(grad).all() and torch.all(grad[pad] == 0)
    assert torch.allclose(grad, clean_grad, atol=1e-12)


@pytest.mark.parametrize("agg", AGG_NAMES)
def test_an_aggregation_ignores_a_nan_at_padding(agg):
    x = ragged_batch()
    values = torch.where(x.loss_mask.bool(), x.advantages, float("nan")).requires_grad_()
    out = AGGREGATIONS[agg](values, x)
    out.backward()
    assert out.item() == pytest.approx(AGGREGATIONS[agg](x.advantages, x).item(), abs=1e-12)
    assert torch.isfinite(values.grad).all()


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_every_loss_reports_ppo_kl_and_the_clipping_ones_clip_frac_lower(loss):
    x = ragged_batch(seed=4)
    metrics = run(loss, x, AlgoConfig()).metrics
    assert "ppo_kl" in metrics
    assert ("clip_frac_lower" in metrics) == (loss in CLIPPING)


def test_token_sum_is_the_sum_of_the_micro_batches_sums():
    x = make(adv=[[1.0, -2.0, 3.0]], ratio=[[1.0, 1.0, 1.0]], logp=[[-0.5, -1.0, -2.0]])
    # reinforce: -A logp = [0.5, -2, 6], summed with no normaliser
    out = run("reinforce", x, AlgoConfig(loss_agg="token-sum"))
    assert out.loss.item() == pytest.approx(4.5, abs=1e-12)


def test_gmpo_golden_and_its_sequence_gradient():
    # clip 0.4. Row 0 (A = 1): log r [0.1, 0.6, -0.5] -> pessimistic [0.1, 0.4, -0.5]
    # (only the upper clip binds for A > 0), mean 0, s = 1. Row 1 (A = -2, third token
    # masked): log r [0.2, -0.7] -> [0.2, -0.4] (the lower clip binds), mean -0.1, s = e^-0.1.
    lr = [[0.1, 0.6, -0.5], [0.2, -0.7, 0.3]]
    x = make(
        adv=[[1.0] * 3, [-2.0] * 3], ratio=[[math.exp(v) for v in row] for row in lr],
        mask=[[1, 1, 1], [1, 1, 0]],
    )  # fmt: skip
    x.logprobs.requires_grad_()
    s1 = math.exp(-0.1)
    out = run("gmpo", x, AlgoConfig())
    assert out.loss.item() == pytest.approx((3 * -1 + 2 * 2 * s1) / 5, abs=1e-12)
    assert out.metrics["clip_frac"] == pytest.approx(2 / 5)
    assert out.metrics["clip_frac_lower"] == pytest.approx(1 / 5)
    seq = AlgoConfig(loss_agg="seq-mean-token-mean")  # the paper's: mean over sequences
    assert run("gmpo", x, seq).loss.item() == pytest.approx((-1 + 2 * s1) / 2, abs=1e-12)
    out.loss.backward()
    # d s_i / d log pi_t = s_i / len_i where unclipped, 0 where clipped; the row's 3 (2) tokens
    # each carry -A s_i / 5: row 0 -> -3/5 * 1/3, row 1 -> 4 s1 / 5 * 1/2
    expected = torch.tensor([[-0.2, 0.0, -0.2], [0.4 * s1, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(x.logprobs.grad, expected, atol=1e-12)


def test_dro_golden_with_its_gradient():
    # beta 0.1, log r [0.5, 0], log pi [-1, -2], A [1, -2]: -(A logp - 0.05 d^2) = [1.0125, -4]
    x = make(adv=[[1.0, -2.0]], ratio=[[math.exp(0.5), 1.0]], logp=[[-1.0, -2.0]])
    x.logprobs.requires_grad_()
    out = run("dro", x, AlgoConfig())
    assert out.loss.item() == pytest.approx((1.0125 - 4) / 2, abs=1e-12)
    assert out.metrics["ppo_kl"] == pytest.approx(-0.25, abs=1e-12)
    out.loss.backward()
    # d/dlogp = -A + beta d: [-1 + 0.05, 2] / 2 tokens
    assert torch.allclose(x.logprobs.grad, torch.tensor([[-0.475, 1.0]], dtype=torch.float64))


# seven tokens (p_old -> p, A): up a little, up too far, down (A > 0 only restricts rises),
# down too far, down a little, up with A < 0, and a rare token rising .01 -> .12
DPPO_OLD = [0.5, 0.5, 0.5, 0.5, 0.5, 0.2, 0.01]
DPPO_NEW = [0.6, 0.7, 0.1, 0.3, 0.4, 0.9, 0.12]
DPPO_ADV = [1.0, 1.0, 2.0, -1.0, -1.0, -0.5, 1.0]


def dppo_inputs():
    logp = [[math.log(p) for p in DPPO_NEW]]
    ratio = [[p / q for p, q in zip(DPPO_NEW, DPPO_OLD)]]
    x = make(adv=[DPPO_ADV], ratio=ratio, logp=logp)
    x.logprobs.requires_grad_()
    return x


def dppo_terms(inside, cap=20.0):
    """-A sg(min(r, cap)) log p on the tokens inside, summed."""
    return sum(
        -a * min(p / q, cap) * math.log(p)
        for a, p, q, keep in zip(DPPO_ADV, DPPO_NEW, DPPO_OLD, inside)
        if keep
    )


def test_dppo_tv_golden():
    # delta 0.15: dropped are token 1 (+0.2 with A > 0) and token 3 (-0.2 with A < 0); the
    # rare token's +0.11 is inside, with ratio 12
    x = dppo_inputs()
    inside = [1, 0, 1, 0, 1, 1, 1]
    out = run("dppo_tv", x, AlgoConfig())
    assert out.loss.item() == pytest.approx(dppo_terms(inside) / 7, abs=1e-12)
    assert out.metrics["clip_frac"] == pytest.approx(2 / 7)
    assert out.metrics["clip_frac_lower"] == pytest.approx(1 / 7)
    out.loss.backward()
    ratio = torch.tensor([DPPO_NEW], dtype=torch.float64) / torch.tensor([DPPO_OLD]).double()
    expected = -x.advantages * ratio * torch.tensor([inside]).double() / 7
    assert torch.allclose(x.logprobs.grad, expected, atol=1e-12)
    capped = run("dppo_tv", dppo_inputs(), AlgoConfig(), ratio_cap=2.0)
    assert capped.loss.item() == pytest.approx(dppo_terms(inside, cap=2.0) / 7, abs=1e-12)


def test_dppo_kl_golden():
    # delta 0.05: Bernoulli KL .5 -> .6 (and .5 -> .4) = .0204, .5 -> .7 (and .5 -> .3) =
    # .0872, .01 -> .12 = .01 ln(1/12) + .99 ln(.99/.88) = .0918: the rare token's rise is
    # dropped here though its TV (.11) is inside
    kl = 0.01 * math.log(0.01 / 0.12) + 0.99 * math.log(0.99 / 0.88)
    assert kl == pytest.approx(0.091756, abs=1e-6)
    x = dppo_inputs()
    out = run("dppo_kl", x, AlgoConfig())
    inside = [1, 0, 1, 0, 1, 1, 0]
    assert out.loss.item() == pytest.approx(dppo_terms(inside) / 7, abs=1e-12)
    assert out.metrics["clip_frac"] == pytest.approx(3 / 7)
    assert out.metrics["clip_frac_lower"] == pytest.approx(1 / 7)


def cov_inputs(log_ratio):
    """A [1, -1, 2, 0], log pi [-1, -2, -0.5, -3]: A - mean = [.5, -1.5, 1.5, -.5], log pi - mean
    = [.625, -.375, 1.125, -1.375], covariance [.3125, .5625, 1.6875, .6875]."""
    x = make(adv=[[1.0, -1.0, 2.0, 0.0]], ratio=[[math.exp(v) for v in log_ratio]],
             logp=[[-1.0, -2.0, -0.5, -3.0]])  # fmt: skip
    x.logprobs.requires_grad_()
    return x


def test_kl_cov_golden_penalises_the_top_covariance_tokens():
    lr = [0.1, -0.2, 0.3, -0.4]
    plain = [-1 * math.exp(0.1), math.exp(-0.2), -2 * math.exp(0.3), 0.0]  # -A r
    # default ratio 0.002 of 4 tokens: at least one, the top token 2, + |0.3|
    out = run("kl_cov", cov_inputs(lr), AlgoConfig())
    assert out.loss.item() == pytest.approx((sum(plain) + 0.3) / 4, abs=1e-12)
    assert out.metrics["cov_frac"] == pytest.approx(1 / 4)
    # ratio 0.5: tokens 2 and 3, + |0.3| + |-0.4|; the penalty's gradient is coef * sign(log r)
    x = cov_inputs(lr)
    out = run("kl_cov", x, AlgoConfig(), ratio=0.5, coef=2.0)
    assert out.loss.item() == pytest.approx((sum(plain) + 2 * 0.7) / 4, abs=1e-12)
    out.loss.backward()
    assert x.logprobs.grad[0, 3].item() == pytest.approx(-2 / 4)  # A = 0: only the penalty


def test_clip_cov_golden_drops_the_gradient_of_covariance_tokens():
    # bounds [0.8, 1.28]: token 2 (A = 2, r = e^.5) is clipped, so never dropped; with
    # covariance in (0.5, 1.0) tokens 1 and 3 are the candidates, and ratio 0.5 drops both
    lr = [0.1, -0.1, 0.5, 0.0]
    algo, band = AlgoConfig(), {"lb": 0.5, "ub": 1.0}
    x = cov_inputs(lr)
    out = run("clip_cov", x, algo, ratio=0.5, **band)
    assert out.loss.item() == pytest.approx((-math.exp(0.1) - 2 * 1.2) / 4, abs=1e-12)
    assert out.metrics["cov_frac"] == pytest.approx(2 / 4)
    assert out.metrics["clip_frac"] == pytest.approx(1 / 4)
    out.loss.backward()
    expected = torch.tensor([[-math.exp(0.1) / 4, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(x.logprobs.grad, expected, atol=1e-12)
    # a wider band would take token 2 too, but a clipped token is never a candidate
    wide = run("clip_cov", cov_inputs(lr), algo, ratio=0.5, lb=0.5, ub=2.0)
    assert wide.metrics["cov_frac"] == pytest.approx(2 / 4)
    # ratio 0.25 drops one of the two candidates, whichever the draw picks
    one = run("clip_cov", cov_inputs(lr), algo, ratio=0.25, **band)
    assert one.metrics["cov_frac"] == pytest.approx(1 / 4)


# ---- DIS (SAO's direct double-sided importance sampling) ----

DIS_RATIOS = [[0.5, 0.69, 0.71, 1.0], [2.0, 5.9, 6.1, 50.0]]  # band (0.7, 6) at 0.3 / 5.0


def dis_inputs(mask=None):
    """Ratios to the behaviour policy DIS_RATIOS; old logprobs are garbage that dis must ignore."""
    ratio = torch.tensor(DIS_RATIOS, dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 2.0, -0.5], [1.5, -2.0, 3.0, 1.0]], dtype=torch.float64)
    logp = torch.tensor([[-0.5, -1.0, -2.0, -0.25], [-1.0, -0.5, -3.0, -4.0]], dtype=torch.float64)
    mask = torch.ones_like(adv) if mask is None else torch.tensor(mask, dtype=torch.float64)
    return LossInputs(
        logp.clone().requires_grad_(),
        torch.full_like(logp, 7.0),
        adv,
        mask,
        num_tokens=float(mask.sum()),
        num_seqs=2,
        behaviour_logprobs=logp - ratio.log(),
    )


def test_dis_golden_masks_outside_the_band_and_keeps_them_in_the_denominator():
    x = dis_inputs()
    out = run("dis", x, AlgoConfig())  # defaults: clip_low 0.3, clip_high 5.0
    # inside (0.7, 6): 0.71, 1.0, 2.0, 5.9; -f(r) A logp for each:
    #   0.71: -0.71 * 2 * -2 = 2.84;  1.0: -1 * -0.5 * -0.25 = -0.125
    #   2.0: -2 * 1.5 * -1 = 3.0;     5.9: -5.9 * -2 * -0.5 = -5.9
    # 0.5, 0.69, 6.1 and 50 give 0 but stay in the token mean: / 8, not / 4
    assert out.loss.item() == pytest.approx((2.84 - 0.125 + 3.0 - 5.9) / 8, abs=1e-12)
    assert out.metrics["mask_frac"] == pytest.approx(4 / 8)
    out.loss.backward()
    # gradient -sg(f(r) A) / 8 per token: r and A are constants for autograd
    inside = torch.tensor([[0, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.float64)
    ratio = torch.tensor(DIS_RATIOS, dtype=torch.float64)
    expected = -ratio * x.advantages * inside / 8
    assert torch.allclose(x.logprobs.grad, expected, atol=1e-12)
    assert x.logprobs.grad[0, 2].item() == pytest.approx(-0.71 * 2 / 8)


def test_dis_band_edges_follow_the_config():
    x = dis_inputs()
    # band (0.4, 2.0 + 4.0): 0.5 and 0.69 join; 6.1 and 50 still out
    out = run("dis", x, AlgoConfig(), clip_low=0.6, clip_high=5.0)
    assert out.metrics["mask_frac"] == pytest.approx(2 / 8)
    # band (0.7, 1.5): only 0.71 and 1.0 inside
    out = run("dis", x, AlgoConfig(), clip_low=0.3, clip_high=0.5)
    assert out.metrics["mask_frac"] == pytest.approx(6 / 8)
    assert out.loss.item() == pytest.approx((2.84 - 0.125) / 8, abs=1e-12)


def test_dis_loss_mask_zeroes_tokens_without_counting_them_as_masked():
    x = dis_inputs(mask=[[1, 1, 1, 1], [1, 1, 0, 0]])  # 6 policy tokens
    out = run("dis", x, AlgoConfig())
    assert out.loss.item() == pytest.approx((2.84 - 0.125 + 3.0 - 5.9) / 6, abs=1e-12)
    assert out.metrics["mask_frac"] == pytest.approx(2 / 6)  # 0.5 and 0.69


def test_dis_needs_behaviour_logprobs():
    x = dis_inputs()
    x.behaviour_logprobs = None
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        run("dis", x, AlgoConfig())


# ---- soft Q-learning ----


def soft_q_case():
    """One row, two policy tokens and a padded one (NaN there), beta 0.5, token-sum.
    x - x_ref = (-1 + 2) - (-1.2 + 2) = 0.2 and (-0.5 + 3) - (-0.5 + 2.5) = 0.5, so Q = [0.1,
    0.25]; targets [0.3, 1.0] leave errors [-0.2, -0.75] and a loss of (0.04 + 0.5625) / 2."""
    nan = float("nan")
    logp = torch.tensor([[-1.0, -0.5, nan]], dtype=torch.float64, requires_grad=True)
    normaliser = torch.tensor([[2.0, 3.0, nan]], dtype=torch.float64, requires_grad=True)
    x = LossInputs(
        logp, logp.detach(), torch.tensor([[0.3, 1.0, 7.0]], dtype=torch.float64),
        torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64), num_tokens=2.0, num_seqs=1,
        normaliser=normaliser, ref_logprobs=torch.tensor([[-1.2, -0.5, 0.0]], dtype=torch.float64),
        ref_normaliser=torch.tensor([[2.0, 2.5, 0.0]], dtype=torch.float64),
    )  # fmt: skip
    return x, logp, normaliser


def test_soft_q_golden_loss_metrics_and_gradients():
    x, logp, normaliser = soft_q_case()
    out = run("soft_q", x, AlgoConfig(loss_agg="token-sum"), beta=0.5)
    assert out.loss.item() == pytest.approx((0.04 + 0.5625) / 2, abs=1e-12)
    assert out.metrics["q/mean"] == pytest.approx((0.1 + 0.25) / 2, abs=1e-12)
    assert out.metrics["q/abs_error"] == pytest.approx((0.2 + 0.75) / 2, abs=1e-12)
    out.loss.backward()
    # d/dlogp = d/dnormaliser = beta * error; nothing at padding
    expected = torch.tensor([[0.5 * -0.2, 0.5 * -0.75, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logp.grad, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(normaliser.grad, expected, rtol=0, atol=1e-12)


def test_soft_q_names_a_missing_field():
    x, _, _ = soft_q_case()
    x.ref_normaliser = None
    with pytest.raises(ValueError, match="ref_normaliser"):
        run("soft_q", x, AlgoConfig())
