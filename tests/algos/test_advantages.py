import math
import statistics

import pytest
import torch

from rlvr.algos.advantages import (
    ADVANTAGES,
    AdvInputs,
    GaeParams,
    MtGrpoParams,
    PassKParams,
    PrefixTreeParams,
    RemaxParams,
    RunningMean,
    SoftQParams,
    TreeParams,
    broadcast_from_last,
    counterfactual,
    dr_grpo,
    gae,
    gae_returns,
    gae_targets,
    gdpo,
    gpg,
    group_stats,
    grpo,
    max_passk,
    mt_grpo,
    mt_otb,
    opo,
    otb,
    passk,
    poise,
    policy_lambda,
    prefix_tree,
    raft,
    reinforce_pp,
    reinforce_pp_baseline,
    remax,
    rloo,
    running_mean,
    sibling_mean,
    soft_bellman,
    token_rewards_or_outcome,
    tree,
)
from rlvr.config import AlgoConfig
from rlvr.registry import bind_params

EPS = 1e-6  # grpo divides by (std + 1e-6)


def inputs(rewards, group_ids, mask=None):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones(len(rewards), 3) if mask is None else torch.tensor(mask, dtype=torch.float32)
    return AdvInputs(rewards, torch.tensor(group_ids), mask)


def per_seq(adv):
    return adv[:, 0].double()


def test_grpo_golden_one_group():
    # rewards [1,0,0,1]: mean 0.5, deviations +-0.5, sum of squares 1,
    # unbiased var 1/3, std sqrt(1/3) -> adv = +-0.5 / sqrt(1/3) = +-0.8660
    adv = grpo(inputs([1, 0, 0, 1], [0, 0, 0, 0]), AlgoConfig())
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    torch.testing.assert_close(
        per_seq(adv), torch.tensor([a, -a, -a, a], dtype=torch.float64), atol=1e-6, rtol=0
    )


def test_grpo_golden_uneven_rewards():
    # rewards [3,1,0,0]: mean 1, deviations [2,0,-1,-1], sum sq 6, var 6/3 = 2, std sqrt(2)
    adv = grpo(inputs([3, 1, 0, 0], [5, 5, 5, 5]), AlgoConfig())
    s = math.sqrt(2) + EPS
    expected = torch.tensor([2 / s, 0, -1 / s, -1 / s], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected, atol=1e-6, rtol=0)


def test_grpo_mean_only():
    adv = grpo(inputs([3, 1, 0, 0], [0, 0, 0, 0]), AlgoConfig(normalize_std=False))
    torch.testing.assert_close(
        per_seq(adv), torch.tensor([2.0, 0, -1, -1], dtype=torch.float64), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, 0.7, 1 / 3])
@pytest.mark.parametrize("n", [2, 3, 7, 16])
def test_grpo_equal_rewards_give_exact_zero(value, n):
    adv = grpo(inputs([value] * n, [0] * n), AlgoConfig())
    assert torch.equal(adv, torch.zeros(n, 3))


def test_grpo_interleaved_groups():
    # group 7 at rows 0,2,4: [1,2,0] -> mean 1, dev [0,1,-1], var 2/2 = 1, std 1
    # group 3 at rows 1,3,5: [0,4,2] -> mean 2, dev [-2,2,0], var 8/2 = 4, std 2
    adv = grpo(inputs([1, 0, 2, 4, 0, 2], [7, 3, 7, 3, 7, 3]), AlgoConfig())
    s7, s3 = 1 + EPS, 2 + EPS
    expected = torch.tensor([0, -2 / s3, 1 / s7, 2 / s3, -1 / s7, 0], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected, atol=1e-6, rtol=0)


def test_grpo_zero_off_mask_and_broadcast_on_it():
    mask = [[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 1, 1, 1]]
    adv = grpo(inputs([1, 0, 0, 1], [0, 0, 0, 0], mask), AlgoConfig())
    m = torch.tensor(mask, dtype=torch.bool)
    assert adv.shape == (4, 4)
    assert torch.all(adv[~m] == 0)
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    for row, sign in enumerate([1, -1, -1, 1]):
        vals = adv[row][m[row]].double()
        torch.testing.assert_close(vals, torch.full_like(vals, sign * a), atol=1e-6, rtol=0)


def test_group_stats_matches_loop_reference():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(40, generator=gen, dtype=torch.float64)
    group_ids = torch.randint(0, 6, (40,), generator=gen) * 11
    means, stds = group_stats(values, group_ids)
    for i in range(40):
        group = values[group_ids == group_ids[i]]
        assert means[i].item() == pytest.approx(group.mean().item(), abs=1e-12)
        expected_std = group.std(unbiased=True).item() if len(group) > 1 else 0.0
        assert stds[i].item() == pytest.approx(expected_std, abs=1e-12)


def test_group_stats_singleton_group_has_zero_std():
    _, stds = group_stats(torch.tensor([5.0, 1.0, 2.0]), torch.tensor([0, 1, 1]))
    assert stds[0].item() == 0.0


def test_grpo_needs_groups_of_two_and_is_registered():
    assert grpo.min_group_size == 2
    assert ADVANTAGES["grpo"] is grpo


# ---------------------------------------------------------------- the other estimators


def adv_inputs(rewards, group_ids, mask, **optional):
    t = {k: torch.tensor(v, dtype=torch.float32) for k, v in optional.items()}
    return AdvInputs(
        torch.tensor(rewards, dtype=torch.float32),
        torch.tensor(group_ids),
        torch.tensor(mask, dtype=torch.float32),
        **t,
    )


def close(actual, expected):
    torch.testing.assert_close(
        actual.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0
    )


def test_token_rewards_or_outcome_puts_reward_on_last_policy_token():
    mask = [[1, 1, 0], [0, 1, 0], [1, 0, 1], [0, 0, 0]]
    x = adv_inputs([1, 2, 3, 4], [0, 0, 0, 0], mask)
    close(token_rewards_or_outcome(x), [[0, 1, 0], [0, 2, 0], [0, 0, 3], [0, 0, 0]])
    x.token_rewards = torch.ones(4, 3)
    assert token_rewards_or_outcome(x) is x.token_rewards


def test_dr_grpo_golden():
    # rewards [3,1,0,0]: mean 1 -> [2,0,-1,-1], no std division whatever normalize_std says
    adv = dr_grpo(inputs([3, 1, 0, 0], [0, 0, 0, 0]), AlgoConfig(normalize_std=True))
    close(per_seq(adv), [2, 0, -1, -1])


def test_rloo_golden():
    # rewards [3,1,0,0]; mean of the others: 3 -> (1+0+0)/3, 1 -> (3+0+0)/3, 0 -> (3+1+0)/3
    # so [3 - 1/3, 1 - 1, 0 - 4/3, 0 - 4/3] = [8/3, 0, -4/3, -4/3]
    adv = rloo(inputs([3, 1, 0, 0], [0, 0, 0, 0]), AlgoConfig())
    close(per_seq(adv), [8 / 3, 0, -4 / 3, -4 / 3])


def test_reinforce_pp_golden():
    # gamma 0.5, reward 1 on row 0's last token, 0 on row 1; row 1 has a prompt token at t=0.
    # returns row 0: [0.25, 0.5, 1], row 1: [-, 0, 0]. Policy tokens [.25,.5,1,0,0]: mean 0.35,
    # deviations [-.1,.15,.65,-.35,-.35], sum sq 0.7, unbiased var 0.7/4, std sqrt(0.175)
    x = inputs([1, 0], [0, 1], [[1, 1, 1], [0, 1, 1]])
    adv = reinforce_pp(x, AlgoConfig(gamma=0.5))
    s = math.sqrt(0.175) + EPS
    close(adv, [[-0.1 / s, 0.15 / s, 0.65 / s], [0, -0.35 / s, -0.35 / s]])


def test_reinforce_pp_baseline_golden():
    # groups {0: [1,0], 1: [1,1]} -> centred [.5,-.5,0,0]; masks have 2,1,2,2 tokens, so the
    # tokens are [.5,.5,-.5,0,0,0,0]: mean 1/14, deviations 3/7 (x2), -4/7, -1/14 (x4),
    # sum sq 18/49 + 16/49 + 4/196 = 5/7, unbiased var 5/42. The all-equal group 1 gets
    # -(1/14)/std, not 0: batch whitening re-centres on the token-weighted mean.
    x = inputs([1, 0, 1, 1], [0, 0, 1, 1], [[1, 1], [1, 0], [1, 1], [1, 1]])
    adv = reinforce_pp_baseline(x, AlgoConfig())
    s = math.sqrt(5 / 42) + EPS
    a, b, c = 3 / 7 / s, -4 / 7 / s, -1 / 14 / s
    close(adv, [[a, a], [b, 0], [c, c], [c, c]])


def test_reinforce_pp_baseline_equal_lengths_keep_equal_groups_at_zero():
    # centred [.5,-.5,0,0] on 2 tokens each: mean 0, sum sq 1, unbiased var 1/7
    adv = reinforce_pp_baseline(inputs([1, 0, 1, 1], [0, 0, 1, 1], [[1, 1]] * 4), AlgoConfig())
    s = math.sqrt(1 / 7) + EPS
    close(per_seq(adv), [0.5 / s, -0.5 / s, 0, 0])


def test_remax_golden():
    # [1 - 0.5, 0.5 - 0.5, 0 - 1]
    x = adv_inputs([1, 0.5, 0], [0, 1, 2], [[1, 1]] * 3, baseline_rewards=[0.5, 0.5, 1])
    close(per_seq(remax(x, AlgoConfig(), params=RemaxParams())), [0.5, 0, -1])


def test_counterfactual_golden():
    # one critic group shown generator answers of mean reward 2/3: [1 - 2/3, 0 - 2/3, 1 - 2/3],
    # and a second whose shown answers were all right, so even a right critic answer earns 0
    x = adv_inputs([1, 0, 1, 1], [0, 0, 0, 1], [[1, 1]] * 4, baseline_rewards=[2 / 3] * 3 + [1])
    close(per_seq(counterfactual(x, AlgoConfig())), [1 / 3, -2 / 3, 1 / 3, 0])
    with pytest.raises(ValueError, match="debate"):
        counterfactual(inputs([1, 0], [0, 0]), AlgoConfig())


def test_opo_golden():
    # lengths [3,1,2], rewards [1,0,1]: b = (3*1 + 1*0 + 2*1) / 6 = 5/6 -> [1/6, -5/6, 1/6]
    x = inputs([1, 0, 1], [4, 4, 4], [[1, 1, 1], [0, 1, 0], [1, 0, 1]])
    adv = opo(x, AlgoConfig())
    close(adv, [[1 / 6] * 3, [0, -5 / 6, 0], [1 / 6, 0, 1 / 6]])


def test_gae_golden_with_observation_gap():
    # gamma 0.9, lam 0.8 (gamma*lam 0.72), reward 1 on the last token, V = [.5, .6, .8]
    # t2: delta = 1 - .8 = .2, A = .2
    # t1: delta = .9*.8 - .6 = .12, A = .12 + .72*.2 = .264
    # t0: delta = .9*.6 - .5 = .04, A = .04 + .72*.264 = .23008
    # returns = A + V = [.73008, .864, 1.0]. Row 1 is the same with an observation token
    # (value 99, reward 5) at t=1 that the recursion skips.
    x = adv_inputs(
        [1, 1],
        [0, 1],
        [[1, 1, 1, 0], [1, 0, 1, 1]],
        token_rewards=[[0, 0, 1, 0], [0, 5, 0, 1]],
        values=[[0.5, 0.6, 0.8, 7], [0.5, 99, 0.6, 0.8]],
    )
    algo = AlgoConfig(gamma=0.9, lam=0.8)
    adv, returns = gae_returns(x, algo, params=GaeParams())
    close(adv, [[0.23008, 0.264, 0.2, 0], [0.23008, 0, 0.264, 0.2]])
    close(returns, [[0.73008, 0.864, 1.0, 0], [0.73008, 0, 0.864, 1.0]])
    assert torch.equal(gae(x, algo, params=GaeParams()), adv)


def test_passk_golden():
    # k=2, N=4. Group 0: one right (N_neg=3): p = 1 - C(3,2)/C(4,2) = 1/2, std 1/2,
    #   A_pos = (1/2)/(1/2) = 1, A_neg = (1/2 - C(2,1)/C(3,1)) / (1/2) = (1/2 - 2/3)*2 = -1/3.
    # Group 1: two right (N_neg=2): p = 1 - C(2,2)/6 = 5/6, std = sqrt(5/36) = sqrt(5)/6,
    #   A_pos = (1/6)/std = 1/sqrt(5), A_neg = (1/6 - C(1,1)/C(3,1))/std = -1/sqrt(5).
    rewards = [0, 1, 0, 0, 1, 0, 1, 0]
    adv = passk(inputs(rewards, [0, 0, 0, 0, 1, 1, 1, 1]), AlgoConfig(), params=PassKParams(k=2))
    s0, s1 = 0.5 + EPS, math.sqrt(5) / 6 + EPS
    n0, p0, p1, n1 = -1 / 6 / s0, 0.5 / s0, 1 / 6 / s1, -1 / 6 / s1
    close(per_seq(adv), [n0, p0, n0, n0, p1, n1, p1, n1])


def test_passk_k1_is_grpo_with_population_std():
    # k=1: p = N_pos/N = mean, A_pos = (1 - mean)/std, A_neg = (1 - mean - 1)/std = -mean/std,
    # i.e. (r - mean)/sqrt(mean(1 - mean)), the population std; grpo uses the unbiased std.
    gen = torch.Generator().manual_seed(1)
    rewards = (torch.rand(48, generator=gen) < 0.4).float()
    group_ids = torch.arange(48) % 6 * 7
    x = AdvInputs(rewards, group_ids, torch.ones(48, 2))
    got = per_seq(passk(x, AlgoConfig(), params=PassKParams(k=1)))
    mean, std = group_stats(rewards.double(), group_ids)
    n = 8
    pop_std = std * math.sqrt((n - 1) / n)
    torch.testing.assert_close(got, (rewards - mean) / (pop_std + EPS), atol=1e-6, rtol=0)
    scaled = per_seq(grpo(x, AlgoConfig())) * math.sqrt(n / (n - 1))
    torch.testing.assert_close(got, scaled, atol=1e-5, rtol=0)


def test_passk_rewards_rare_successes_more_and_sums_to_zero():
    n = 8
    groups = [[1] * c + [0] * (n - c) for c in range(1, n)]
    rewards = [r for g in groups for r in g]
    group_ids = [i for i in range(len(groups)) for _ in range(n)]
    for k in (1, 2, 4, 7):
        adv = per_seq(
            passk(inputs(rewards, group_ids), AlgoConfig(), params=PassKParams(k=k))
        ).view(-1, n)
        correct = adv[:, 0]  # first member of each group is right; groups have 1..7 right
        assert torch.all(correct[:-1] >= correct[1:])
        assert torch.all(correct[correct != 0] > 0)
        # sum over the group: N_pos q - N_neg (q - t) with q = (N_neg / N) t, so exactly 0
        torch.testing.assert_close(
            adv.sum(1), torch.zeros(len(groups), dtype=torch.float64), atol=1e-6, rtol=0
        )
    # with k=2 a single success is worth more than any one of three successes
    adv = per_seq(passk(inputs(rewards, group_ids), AlgoConfig(), params=PassKParams(k=2))).view(
        -1, n
    )
    assert adv[0, 0] > adv[2, 0] > 0


def test_passk_raises_on_non_binary_rewards_and_too_large_k():
    with pytest.raises(ValueError, match="0/1 rewards"):
        passk(inputs([1, 0.5, 0, 0], [0, 0, 0, 0]), AlgoConfig(), params=PassKParams(k=2))
    with pytest.raises(ValueError, match="k=4 with a group of 4"):
        passk(inputs([1, 0, 0, 0], [0, 0, 0, 0]), AlgoConfig(), params=PassKParams(k=4))
    passk(
        inputs([1, 0, 0, 0], [0, 0, 0, 0]), AlgoConfig(), params=PassKParams(k=3)
    )  # k = N-1 is fine


def test_remax_reward_to_go_golden():
    # token rewards [0.5, 0, 1] (reward 1.5), baseline 1. Default: 1.5 - 1 on every token;
    # reward to go: [1.5, 1, 1] - 1. Row 1 has only the outcome: both forms agree.
    x = adv_inputs(
        [1.5, 1], [0, 1], [[1, 1, 1], [1, 1, 0]], baseline_rewards=[1, 0.5],
        token_rewards=[[0.5, 0, 1], [0, 1, 0]],
    )  # fmt: skip
    close(remax(x, AlgoConfig(), params=RemaxParams()), [[0.5, 0.5, 0.5], [0.5, 0.5, 0]])
    to_go = RemaxParams(reward_to_go=True)
    close(remax(x, AlgoConfig(), params=to_go), [[0.5, 0, 0], [0.5, 0.5, 0]])


def test_gae_whitened_over_the_batch_golden():
    # gamma = lam = 1, V = 0, outcome rewards: raw A = the reward on each policy token,
    # [2, 2, 2 | 1]: mean 7/4, deviations [1/4, 1/4, 1/4, -3/4], sum sq 3/4, unbiased var 1/4.
    # The critic's targets stay raw (A + V).
    x = adv_inputs([2, 1], [0, 1], [[1, 1, 0, 1], [0, 1, 0, 0]], values=[[0] * 4] * 2)
    algo, whiten = AlgoConfig(), GaeParams(whiten_advantages=True)
    s = 0.5 + EPS
    close(gae(x, algo, params=whiten), [[0.25 / s, 0.25 / s, 0, 0.25 / s], [0, -0.75 / s, 0, 0]])
    close(gae(x, algo, params=GaeParams()), [[2, 2, 0, 2], [0, 1, 0, 0]])
    close(gae_targets(x, algo, params=whiten), [[2, 2, 0, 2], [0, 1, 0, 0]])


def test_gpg_golden():
    # 3 of 8 rewards are non-zero: alpha = 8/3. Group 0 [1,0,0,0] mean 1/4, group 1 [1,1,0,0]
    # mean 1/2: alpha * (r - mean) = [2, -2/3, -2/3, -2/3, 4/3, 4/3, -4/3, -4/3]
    adv = gpg(inputs([1, 0, 0, 0, 1, 1, 0, 0], [0] * 4 + [1] * 4), AlgoConfig())
    close(per_seq(adv), [2, -2 / 3, -2 / 3, -2 / 3, 4 / 3, 4 / 3, -4 / 3, -4 / 3])


def test_gdpo_golden_two_components():
    # groups of 3, weights [1, 0.5], every row 2 policy tokens (so the token whitening weighs
    # rows equally). Component 1 [1,0,0 | 1,1,0]: each group has std 1/sqrt(3), so
    # [2, -1, -1]/sqrt(3) and [1, 1, -2]/sqrt(3); component 2 [0,1,2 | 2,2,2]: [-1, 0, 1] and 0.
    # Sums: [2/sqrt3 - .5, -1/sqrt3, -1/sqrt3 + .5, 1/sqrt3, 1/sqrt3, -2/sqrt3]; their mean is 0
    # and the unbiased std over the 12 tokens is sqrt(2 * sum sq / 11).
    r3 = 1 / math.sqrt(3)
    ones = [[1, 1]] * 6
    components = [[1, 0], [0, 1], [0, 2], [1, 2], [1, 2], [0, 2]]
    x = adv_inputs([0] * 6, [0, 0, 0, 1, 1, 1], ones, reward_components=components,
                   reward_weights=[1, 0.5])  # fmt: skip
    sums = [2 * r3 - 0.5, -r3, -r3 + 0.5, r3, r3, -2 * r3]
    std = math.sqrt(2 * sum(v * v for v in sums) / 11) + EPS
    close(per_seq(gdpo(x, AlgoConfig())), [v / std for v in sums])


def test_gdpo_of_one_component_is_grpo_whitened_over_the_batch():
    x = inputs([1, 0, 0, 3, 1, 2], [0, 0, 0, 1, 1, 1], [[1, 1, 0], [1, 0, 0], [1, 1, 1]] * 2)
    centred = grpo(x, AlgoConfig()).double()
    on = x.loss_mask.bool()
    want = torch.where(on, (centred - centred[on].mean()) / (centred[on].std() + EPS), 0.0)
    torch.testing.assert_close(gdpo(x, AlgoConfig()).double(), want, atol=1e-6, rtol=0)
    x.reward_components = x.rewards[:, None]
    torch.testing.assert_close(gdpo(x, AlgoConfig()).double(), want, atol=1e-6, rtol=0)


def test_max_passk_golden():
    # group 0 [0.1, 0.7, 0.4, 0.3]: the best gets 0.7 - 0.4 = 0.3, over the group std (mean
    # 0.375, sum sq 0.1875, unbiased var 0.0625, std 0.25) = 1.2; group 1 ties at 0.9: all 0
    x = inputs([0.1, 0.7, 0.4, 0.3, 0.2, 0.9, 0.5, 0.9], [0] * 4 + [1] * 4)
    close(per_seq(max_passk(x, AlgoConfig(normalize_std=False))), [0, 0.3, 0, 0, 0, 0, 0, 0])
    close(per_seq(max_passk(x, AlgoConfig())), [0, 0.3 / (0.25 + EPS), 0, 0, 0, 0, 0, 0])


def otb_inputs():
    """Two samples of one prompt with an observation gap: row 0 policy tokens at columns 0, 1, 3
    (reward 1), row 1 at 0, 2, 3 (reward 0). Per-token weights w = 1 - 2 pi + sum pi^2:
    row 0 all 0.5 (pi = 0.5, sum 0.5), row 1 [0.75, 0.25, 0.5] (pi, sum: .25 .25, .5 .25, .5 .5),
    so W (cumulated over policy tokens) is [.5, 1, -, 1.5] and [.75, -, 1, 1.5]."""
    return adv_inputs(
        [1, 0], [3, 3], [[1, 1, 0, 1], [1, 0, 1, 1]],
        old_logprobs=[[math.log(0.5)] * 4, [math.log(0.25), 0, math.log(0.5), math.log(0.5)]],
        sum_pi_squared=[[0.5] * 4, [0.25, 0, 0.25, 0.5]],
    )  # fmt: skip


def test_otb_golden_steps_count_from_the_first_policy_token():
    # G = 1 on row 0's tokens, 0 on row 1's. Steps (columns here): 0 both -> B = .5/1.25 = .4;
    # step 1 only row 0 and step 2 only row 1 -> B = 0 (the advantage is the own return);
    # step 3 both, W 1.5 each -> B = 1.5/3 = .5
    close(otb(otb_inputs(), AlgoConfig()), [[0.6, 1, 0, 0.5], [-0.4, 0, 0, -0.5]])


def test_mt_otb_golden_steps_count_policy_tokens_only():
    # the k-th policy tokens: (col 0, col 0) B = .4; (col 1, col 2) W 1 and 1 -> B = .5;
    # (col 3, col 3) W 1.5 and 1.5 -> B = .5
    close(mt_otb(otb_inputs(), AlgoConfig()), [[0.6, 0.5, 0, 0.5], [-0.4, 0, -0.5, -0.5]])


def test_otb_single_turn_golden_with_a_prompt_and_a_longer_sample():
    # prompts of one token; row 0: pi [.5, .8, 1] sum pi^2 [.5, .7, 1] -> w [.5, .1, 0], W
    # [.5, .6, .6]; row 1: pi [.25, .5], sums [.25, .5] -> w [.75, .5], W [.75, 1.25].
    # Rewards 1 and 0: step 0 B = .5/1.25 = .4, step 1 B = .6/1.85, step 2 only row 0: B = 0.
    log = math.log
    x = adv_inputs(
        [1, 0], [0, 0], [[0, 1, 1, 1], [0, 1, 1, 0]],
        old_logprobs=[[0, log(0.5), log(0.8), 0], [0, log(0.25), log(0.5), 0]],
        sum_pi_squared=[[0, 0.5, 0.7, 1], [0, 0.25, 0.5, 0]],
    )  # fmt: skip
    b1 = 0.6 / (1.85 + 1e-8)
    close(otb(x, AlgoConfig()), [[0, 0.6, 1 - b1, 1], [0, -0.4, -b1, 0]])
    assert torch.equal(mt_otb(x, AlgoConfig()), otb(x, AlgoConfig()))  # no observation gap


def test_otb_needs_the_forward_pass_fields():
    x = otb_inputs()
    x.sum_pi_squared = None
    with pytest.raises(ValueError, match="AdvInputs.sum_pi_squared.*old-logprob pass"):
        otb(x, AlgoConfig())


def test_missing_fields_raise_naming_the_field():
    x = inputs([1, 0], [0, 0])
    with pytest.raises(ValueError, match="AdvInputs.values.*critic"):
        gae(x, AlgoConfig(), params=GaeParams())
    with pytest.raises(ValueError, match="AdvInputs.baseline_rewards.*greedy"):
        remax(x, AlgoConfig(), params=RemaxParams())


# ---------------------------------------------------------------- loop references, random data


def random_batch(seed, b=24, t=12):
    gen = torch.Generator().manual_seed(seed)
    group_ids = torch.tensor([3, 17, 42, 99, 5, 64])[torch.randperm(b, generator=gen) % 6]
    mask = (torch.rand(b, t, generator=gen) < 0.7).float()  # ragged, with gaps
    mask[1] = 0  # one fully masked row
    mask[2, :] = 0
    mask[2, 5:] = 1  # one row with a prompt prefix only
    nan = torch.full((b, t), float("nan"))  # off-mask garbage must never leak in
    on = mask.bool()
    return AdvInputs(
        rewards=torch.randn(b, generator=gen),
        group_ids=group_ids,
        loss_mask=mask,
        token_rewards=torch.where(on, torch.randn(b, t, generator=gen), nan),
        values=torch.where(on, torch.randn(b, t, generator=gen), nan),
        baseline_rewards=torch.randn(b, generator=gen),
    )


def loop_grpo(x, normalize_std):
    r, g = x.rewards.tolist(), x.group_ids.tolist()
    out = []
    for i in range(len(r)):
        group = [r[j] for j in range(len(r)) if g[j] == g[i]]
        a = r[i] - sum(group) / len(group)
        out.append(a / (statistics.stdev(group) + EPS) if normalize_std else a)
    return out


def loop_rloo(x):
    r, g = x.rewards.tolist(), x.group_ids.tolist()
    out = []
    for i in range(len(r)):
        others = [r[j] for j in range(len(r)) if g[j] == g[i] and j != i]
        out.append(r[i] - sum(others) / len(others))
    return out


def loop_opo(x):
    r, g = x.rewards.tolist(), x.group_ids.tolist()
    lengths = [sum(row) for row in x.loss_mask.tolist()]
    out = []
    for i in range(len(r)):
        members = [j for j in range(len(r)) if g[j] == g[i]]
        b = sum(lengths[j] * r[j] for j in members) / sum(lengths[j] for j in members)
        out.append(r[i] - b)
    return out


def policy_positions(x):
    return [[t for t, m in enumerate(row) if m] for row in x.loss_mask.tolist()]


def loop_reinforce_pp(x, gamma):
    rewards = x.token_rewards.tolist()
    returns = {}
    for i, pos in enumerate(policy_positions(x)):
        for j, t in enumerate(pos):
            returns[i, t] = sum(gamma**p * rewards[i][s] for p, s in enumerate(pos[j:]))
    mean, std = statistics.mean(returns.values()), statistics.stdev(returns.values())
    out = torch.zeros(x.loss_mask.shape, dtype=torch.float64)
    for (i, t), v in returns.items():
        out[i, t] = (v - mean) / (std + EPS)
    return out


def loop_gae(x, gamma, lam):
    r, v = x.token_rewards.tolist(), x.values.tolist()
    out = torch.zeros(x.loss_mask.shape, dtype=torch.float64)
    for i, pos in enumerate(policy_positions(x)):
        vals = [v[i][t] for t in pos] + [0.0]
        deltas = [r[i][t] + gamma * vals[j + 1] - vals[j] for j, t in enumerate(pos)]
        for j, t in enumerate(pos):  # the explicit sum, not the recursion
            out[i, t] = sum((gamma * lam) ** p * d for p, d in enumerate(deltas[j:]))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_estimators_match_loop_reference(seed):
    x = random_batch(seed)
    mask = x.loss_mask
    for fn, expected in [
        (lambda x: grpo(x, AlgoConfig()), loop_grpo(x, True)),
        (lambda x: grpo(x, AlgoConfig(normalize_std=False)), loop_grpo(x, False)),
        (lambda x: dr_grpo(x, AlgoConfig()), loop_grpo(x, False)),
        (lambda x: rloo(x, AlgoConfig()), loop_rloo(x)),
        (lambda x: opo(x, AlgoConfig()), loop_opo(x)),
    ]:
        want = torch.tensor(expected, dtype=torch.float64)[:, None] * mask.double()
        torch.testing.assert_close(fn(x).double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.95), (0.5, 0.0)])
def test_token_estimators_match_loop_reference(seed, gamma, lam):
    x = random_batch(seed)
    algo = AlgoConfig(gamma=gamma, lam=lam)
    got = reinforce_pp(x, algo).double()
    torch.testing.assert_close(got, loop_reinforce_pp(x, gamma), atol=1e-5, rtol=1e-5)
    adv, returns = gae_returns(x, algo, params=GaeParams())
    torch.testing.assert_close(adv.double(), loop_gae(x, gamma, lam), atol=1e-5, rtol=1e-5)
    want = torch.where(x.loss_mask.bool(), adv.double() + x.values.double(), 0.0)
    torch.testing.assert_close(returns.double(), want, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- every estimator


def run_any(name, x, **algo):
    """ADVANTAGES[name] with its default settings bound (passk: k = 2, below the groups of 4)."""
    fn = ADVANTAGES[name]
    if hasattr(fn, "Params"):
        fn = bind_params(fn, fn.Params(**({"k": 2} if name == "passk" else {})))
    return fn(x, AlgoConfig(**algo))


def binary_batch(rewards, group_ids, mask):
    x = inputs(rewards, group_ids, mask)
    x.values = torch.zeros(x.loss_mask.shape)
    x.baseline_rewards = torch.tensor(rewards, dtype=torch.float32)
    x.turn_rewards = torch.tensor(rewards, dtype=torch.float32)[:, None]  # one turn each
    x.turn_ids = torch.where(x.loss_mask.bool(), 0, -1)
    # a flat tree: every row a leaf right below its group's root
    mean, _ = group_stats(x.rewards, x.group_ids)
    x.segment_advantages = (x.rewards - mean)[:, None] * x.loss_mask
    x.segment_weights = x.loss_mask.clone()
    x.reward_mean = torch.tensor(0.25)
    x.old_logprobs = torch.full(x.loss_mask.shape, math.log(0.5))
    x.sum_pi_squared = torch.full(x.loss_mask.shape, 0.3)
    x.probe_predictions = x.rewards.double()  # poise's bootstrap: rloo
    x.old_normaliser = torch.linspace(-0.5, 0.5, x.loss_mask.numel()).view(x.loss_mask.shape)
    x.ref_normaliser = torch.zeros(x.loss_mask.shape)
    x.ref_logprobs = torch.full(x.loss_mask.shape, math.log(0.4))
    x.target_ids = torch.arange(x.loss_mask.numel()).view(x.loss_mask.shape)  # nobody shares
    return x


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_every_estimator_is_zero_off_mask_finite_and_float32(name):
    mask = [[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1]] * 2
    x = binary_batch([1, 0, 0, 1, 1, 1, 0, 0], [2, 2, 2, 2, 9, 9, 9, 9], mask)
    adv = run_any(name, x)
    assert adv.shape == (8, 4) and adv.dtype == torch.float32
    assert torch.isfinite(adv).all()
    assert torch.all(adv[~x.loss_mask.bool()] == 0)


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_every_estimator_gives_finite_zeros_without_policy_tokens(name):
    x = binary_batch([1, 0, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1], [[0, 0, 0]] * 6)
    assert torch.equal(run_any(name, x), torch.zeros(6, 3))


GROUP_ESTIMATORS = [
    "grpo", "mt_grpo", "dr_grpo", "rloo", "gpg", "gdpo", "reinforce_pp_baseline", "opo", "passk",
    "max_passk", "tree", "prefix_tree", "poise",
]  # fmt: skip
# otb's group baseline is per step: where only the longest sample has a token, that token's
# advantage is its own return, so an all-equal group is not all zero
PAIRWISE = [*GROUP_ESTIMATORS, "otb", "mt_otb"]


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_group_estimators_give_zero_for_all_equal_groups(name, value):
    mask = [[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1]] * 2
    x = binary_batch([value] * 8, [5, 5, 5, 5, 8, 8, 8, 8], mask)
    adv = run_any(name, x)
    torch.testing.assert_close(adv, torch.zeros(8, 3), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "opo", "prefix_tree"])
def test_per_group_estimators_zero_an_equal_group_next_to_a_mixed_one(name):
    x = binary_batch([1, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [[1, 1, 0], [1, 0, 1]] * 3)
    adv = run_any(name, x)
    assert torch.equal(adv[3:], torch.zeros(3, 3))
    assert adv[:3].abs().sum() > 0


def test_registry_metadata():
    assert set(ADVANTAGES) == {
        "grpo",
        "mt_grpo",
        "dr_grpo",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "remax",
        "opo",
        "gae",
        "passk",
        "tree",
        "prefix_tree",
        "running_mean",
        "gpg",
        "gdpo",
        "max_passk",
        "otb",
        "mt_otb",
        "poise",
        "counterfactual",
        "soft_bellman",
        "raft",
    }
    for name, fn in ADVANTAGES.items():
        assert fn.__doc__ and fn.__doc__.strip().splitlines()[0], name
        expected = 2 if name in PAIRWISE else 1
        minimum = getattr(fn, "min_group_size", 1)
        if name == "passk":
            assert minimum(PassKParams(k=4)) == 5  # k = N gives all-zero advantages
            continue
        assert minimum == expected, name
    assert gae.requires == ("values",)
    assert remax.requires == counterfactual.requires == ("baseline_rewards",)
    assert mt_grpo.requires == ("turn_rewards", "turn_ids")
    assert tree.requires == ("segment_advantages", "segment_weights")
    assert prefix_tree.requires == ("target_ids",)
    assert running_mean.requires == ("reward_mean",)
    assert otb.requires == mt_otb.requires == ("old_logprobs", "sum_pi_squared")
    assert poise.requires == ("probe_predictions",)
    assert soft_bellman.requires == (
        "old_logprobs", "old_normaliser", "ref_logprobs", "ref_normaliser"
    )  # fmt: skip
    assert gae.critic_targets is gae_targets


# ---------------------------------------------------------------- mt_grpo


def test_mt_grpo_golden_two_turn_episodes():
    # One group of 4. Turn rewards (turn 0 = tool used, turn 1 = outcome):
    #   a: [1, 1]  b: [0, 1]  c: [1, 0]  d: one turn only, outcome 0
    # Outcome [1, 1, 0, 0]: mean .5, unbiased std sqrt(1/3) -> A_out = +-0.8660.
    # Turn 0 is an earlier turn for a, b, c only: [1, 0, 1], mean 2/3, deviations
    # [1/3, -2/3, 1/3], unbiased var (1/9 + 4/9 + 1/9) / 2 = 1/3 -> A_0 = [.5774, -1.1547, .5774].
    nan = float("nan")
    x = inputs([2, 1, 1, 0], [0, 0, 0, 0], [[1, 1, 0, 1]] * 3 + [[1, 1, 0, 0]])
    x.turn_rewards = torch.tensor([[1, 1], [0, 1], [1, 0], [0, nan]], dtype=torch.float32)
    x.turn_ids = torch.tensor([[0, 0, -1, 1]] * 3 + [[0, 0, -1, -1]])
    adv = mt_grpo(x, AlgoConfig(), params=MtGrpoParams(turn_coef=0.5))
    a_out, a_0 = 0.5 / (1 / 3) ** 0.5, [(1 / 3) / (1 / 3) ** 0.5, -(2 / 3) / (1 / 3) ** 0.5]
    expected = torch.tensor(
        [
            [a_out + 0.5 * a_0[0]] * 2 + [0, a_out],
            [a_out + 0.5 * a_0[1]] * 2 + [0, a_out],
            [-a_out + 0.5 * a_0[0]] * 2 + [0, -a_out],
            [-a_out] * 2 + [0, 0],  # its only turn is its last: the outcome alone
        ]
    )
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=0)


def test_mt_grpo_of_single_turn_episodes_is_grpo():
    x = binary_batch([1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1], [[1, 1, 0]] * 6)
    adv = mt_grpo(x, AlgoConfig(), params=MtGrpoParams())
    torch.testing.assert_close(adv, grpo(x, AlgoConfig()))


# ---------------------------------------------------------------- tree


def tree_args(normalize_std=True, **settings):
    """tree's (algo, params) arguments: AlgoConfig's normalize_std and its own settings."""
    return {"algo": AlgoConfig(normalize_std=normalize_std), "params": TreeParams(**settings)}


def prefix_args(normalize_std=True, **settings):
    """prefix_tree's (algo, params) arguments, as tree_args."""
    return {"algo": AlgoConfig(normalize_std=normalize_std), "params": PrefixTreeParams(**settings)}


def hand_tree_inputs():
    """Two levels, width 2: root -> A -> (a1 = 1, a2 = 0), root -> B -> (b1 = 1, b2 = 1).
    Columns: a prompt token, two tokens of A's (or B's) segment, two of the leaf's own.
    V(root) = .75, V(A) = .5, V(B) = 1: A's segment .5 - .75 = -.25, B's +.25 (2 leaves
    each, weight 1/2); leaf segments a1 1 - .5 = .5, a2 -.5, b1 = b2 = 0 (weight 1)."""
    mask = [[0, 1, 1, 1, 1]] * 4
    x = adv_inputs([1, 0, 1, 1], [0, 0, 0, 0], mask)
    x.segment_advantages = torch.tensor(
        [
            [0, -0.25, -0.25, 0.5, 0.5],
            [0, -0.25, -0.25, -0.5, -0.5],
            [0, 0.25, 0.25, 0, 0],
            [0, 0.25, 0.25, 0, 0],
        ]
    )
    x.segment_weights = torch.tensor([[0, 0.5, 0.5, 1, 1]] * 4)
    return x


def test_tree_golden_two_levels_width_two():
    # each shared segment counts once: -.25 * 1/2 on A's tokens, .25 * 1/2 on B's
    close(
        tree(hand_tree_inputs(), **tree_args()),
        [
            [0, -0.125, -0.125, 0.5, 0.5],
            [0, -0.125, -0.125, -0.5, -0.5],
            [0, 0.125, 0.125, 0, 0],
            [0, 0.125, 0.125, 0, 0],
        ],
    )
    # without dedup, every leaf pushes its shared segment at full weight
    x = hand_tree_inputs()
    close(tree(x, **tree_args(dedup_shared=False)), x.segment_advantages.tolist())


def test_tree_adds_the_group_normalised_outcome():
    # outcome term r - .75 = [.25, -.75, .25, .25] (mean only), then weighted per segment:
    #   a1: A (-.25 + .25) / 2 = 0,     own .5 + .25 = .75
    #   a2: A (-.25 - .75) / 2 = -.5,   own -.5 - .75 = -1.25
    #   b:  B (.25 + .25) / 2 = .25,    own 0 + .25 = .25
    adv = tree(hand_tree_inputs(), **tree_args(outcome_coef=1.0, normalize_std=False))
    close(
        adv,
        [
            [0, 0, 0, 0.75, 0.75],
            [0, -0.5, -0.5, -1.25, -1.25],
            [0, 0.25, 0.25, 0.25, 0.25],
            [0, 0.25, 0.25, 0.25, 0.25],
        ],
    )
    # with the std: unbiased std of [1, 0, 1, 1] is .5, so the term is [.5, -1.5, .5, .5];
    # a2 with coef .5 (term .5 * -1.5 = -.75): A (-.25 - .75) / 2 = -.5, own -.5 - .75 = -1.25
    adv = tree(hand_tree_inputs(), **tree_args(outcome_coef=0.5))
    term = 0.5 * -0.75 / (0.5 + EPS)  # coef * (r - mean) / (std + EPS)
    close(adv[1], [0, (-0.25 + term) / 2, (-0.25 + term) / 2, -0.5 + term, -0.5 + term])
    want = torch.tensor([0, -0.5, -0.5, -1.25, -1.25])
    torch.testing.assert_close(adv[1], want, atol=1e-5, rtol=0)  # EPS aside


def test_tree_is_zero_off_the_mask_and_needs_its_fields():
    x = hand_tree_inputs()
    x.loss_mask = torch.tensor([[0, 1, 0, 1, 0]] * 4, dtype=torch.float32)
    adv = tree(x, **tree_args())
    close(
        adv,
        [
            [0, -0.125, 0, 0.5, 0],
            [0, -0.125, 0, -0.5, 0],
            [0, 0.125, 0, 0, 0],
            [0, 0.125, 0, 0, 0],
        ],
    )
    x.segment_weights = None
    with pytest.raises(ValueError, match="segment_weights"):
        tree(x, **tree_args())
    assert ADVANTAGES["tree"] is tree and tree.min_group_size == 2


def hand_prefix_inputs() -> AdvInputs:
    # group 0: three replies to one prompt token (7); A and B part at their last token, C leaves
    # both one token earlier. Group 1: D stops (its end-of-reply token 9) where E goes on.
    x = AdvInputs(
        rewards=torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]),
        group_ids=torch.tensor([0, 0, 0, 1, 1]),
        loss_mask=torch.tensor(
            [[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 1]],
            dtype=torch.float32,
        ),
    )
    x.target_ids = torch.tensor(
        [[7, 1, 2, 3], [7, 1, 2, 4], [7, 1, 5, 5], [7, 1, 9, -1], [7, 1, 2, 9]]
    )
    return x


def test_prefix_tree_golden_credit_lands_where_replies_part():
    # group 0, root value 1/3. A: after "1" all three (1/3), after "2" A and B (1/2), after
    # "3" A alone (1): credits 0, 1/6, 1/2. B: 0, 1/6, -1/2. C: 0, then alone at 0: -1/3.
    # group 1, root 1/2: D's "9" leads to D alone (1): +1/2; E's "2" to E alone (0): -1/2,
    # and E's last token, alone already, gets 0.
    adv = prefix_tree(hand_prefix_inputs(), **prefix_args(normalize_std=False))
    close(
        adv,
        [
            [0, 0, 1 / 6, 1 / 2],
            [0, 0, 1 / 6, -1 / 2],
            [0, 0, -1 / 3, 0],
            [0, 0, 1 / 2, 0],
            [0, 0, -1 / 2, 0],
        ],
    )


def test_prefix_tree_credits_add_up_to_grpo_along_each_reply():
    torch.manual_seed(0)
    size, width = 24, 12
    x = AdvInputs(
        rewards=torch.rand(size),
        group_ids=torch.arange(size) // 6,
        loss_mask=torch.ones(size, width),
    )
    # few symbols, so replies share prefixes of many lengths
    x.target_ids = torch.randint(0, 2, (size, width)).cumsum(-1) % 3
    x.target_ids[:, 0] = 7  # the prompt's token
    for std in (False, True):
        adv = prefix_tree(x, **prefix_args(normalize_std=std))
        close(adv.sum(-1), grpo(x, AlgoConfig(normalize_std=std))[:, 0].tolist())
    outcome = grpo(x, AlgoConfig())
    plus = prefix_tree(x, **prefix_args(outcome_coef=0.5))
    close(plus, (prefix_tree(x, **prefix_args()) + 0.5 * outcome).tolist())


def test_prefix_tree_needs_the_tokens():
    x = hand_prefix_inputs()
    x.target_ids = None
    with pytest.raises(ValueError, match="target_ids"):
        prefix_tree(x, **prefix_args())


def test_gae_golden_two_turns_with_an_observation_gap():
    # tokens: prompt p p | turn 1 a a | observation o o | turn 2 b b; turn rewards on each
    # turn's last token (0.1, then the outcome 1.0); the recursion skips the observation, so
    # turn 1's last token bootstraps from turn 2's first value.
    # gamma .9, lam .8:
    #   A7 = 1 - .2 = .8
    #   A6 = .9*.2 - .3 + .72*.8 = .456
    #   A3 = .1 + .9*.3 - .4 + .72*.456 = .29832
    #   A2 = .9*.4 - .5 + .72*.29832 = .0747904
    x = inputs([1.1], [0], [[0, 0, 1, 1, 0, 0, 1, 1]])
    x.token_rewards = torch.tensor([[0, 0, 0, 0.1, 0, 0, 0, 1.0]])
    x.values = torch.tensor([[0, 0, 0.5, 0.4, 0, 0, 0.3, 0.2]])
    adv, returns = gae_returns(x, AlgoConfig(gamma=0.9, lam=0.8), params=GaeParams())
    expected = torch.tensor([[0, 0, 0.0747904, 0.29832, 0, 0, 0.456, 0.8]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(returns, (expected + x.values) * x.loss_mask, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- SAO: gae lambda, running mean


def two_turn_rows():
    # row 0: prompt p p | turn 1 a a | observation o o | turn 2 b b (4 policy tokens), turn
    # rewards 0.1 and 1.0 on each turn's last token; row 1: two policy tokens, reward 1 at the end
    x = inputs([1.1, 1.0], [0, 1], [[0, 0, 1, 1, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1]])
    x.token_rewards = torch.tensor([[0, 0, 0, 0.1, 0, 0, 0, 1.0], [0, 0, 0, 0, 0, 0, 0, 1.0]])
    x.values = torch.tensor([[0, 0, 0.5, 0.4, 9, 9, 0.3, 0.2], [0, 0, 0, 0, 0, 0, 0.3, 0.2]])
    return x


def test_gae_length_adaptive_lambda_golden_two_turns_with_an_observation_gap():
    # alpha 1.5: row 0 has len 4 -> lam = 1 - 1/6 = 5/6, gamma*lam = .9 * 5/6 = .75;
    #            row 1 has len 2 -> lam = 1 - 1/3 = 2/3, gamma*lam = .6.
    # Row 0 skips the observation (values 9 unused): turn 1's last token bootstraps from V6.
    #   A7 = 1 - .2 = .8
    #   A6 = (.9*.2 - .3) + .75*.8 = -.12 + .6 = .48
    #   A3 = (.1 + .9*.3 - .4) + .75*.48 = -.03 + .36 = .33
    #   A2 = (.9*.4 - .5) + .75*.33 = -.14 + .2475 = .1075
    # Row 1: A7 = .8, A6 = -.12 + .6*.8 = .36
    # Critic targets use lam = 1: the discounted return to go, whatever the values:
    #   row 0: R7 = 1, R6 = .9, R3 = .1 + .9*.9 = .91, R2 = .9*.91 = .819; row 1: R7 = 1, R6 = .9
    x = two_turn_rows()
    algo, params = AlgoConfig(gamma=0.9), GaeParams(lam_mode="length_adaptive", lam_alpha=1.5)
    close(policy_lambda(x, algo, params), [5 / 6, 2 / 3])
    adv, returns = gae_returns(x, algo, params=params)
    close(adv, [[0, 0, 0.1075, 0.33, 0, 0, 0.48, 0.8], [0, 0, 0, 0, 0, 0, 0.36, 0.8]])
    close(returns, [[0, 0, 0.819, 0.91, 0, 0, 0.9, 1.0], [0, 0, 0, 0, 0, 0, 0.9, 1.0]])
    assert torch.equal(gae(x, algo, params=params), adv)
    assert torch.equal(gae_targets(x, algo, params=params), returns)


def test_fixed_lambda_targets_are_advantages_plus_values():
    x = two_turn_rows()
    algo = AlgoConfig(gamma=0.9, lam=0.8)
    close(policy_lambda(x, algo, GaeParams()), [0.8, 0.8])
    adv, returns = gae_returns(x, algo, params=GaeParams())
    torch.testing.assert_close(returns, (adv + x.values) * x.loss_mask, atol=1e-6, rtol=0)


def test_length_adaptive_lambda_is_clamped_at_zero():
    x = inputs([1.0, 1.0], [0, 1], [[1, 0, 0], [1, 1, 1]])
    # alpha .5: len 1 -> 1 - 2 = -1 -> 0; len 3 -> 1 - 2/3 = 1/3
    params = GaeParams(lam_mode="length_adaptive", lam_alpha=0.5)
    close(policy_lambda(x, AlgoConfig(), params), [0, 1 / 3])


def test_running_mean_golden():
    # b = .25: A = r - b on every policy token
    x = inputs([1.0, 0.0, 0.5], [0, 1, 2], [[1, 1, 0], [0, 1, 1], [1, 0, 1]])
    x.reward_mean = torch.tensor(0.25)
    adv = running_mean(x, AlgoConfig())
    close(adv, [[0.75, 0.75, 0], [0, -0.25, -0.25], [0.25, 0, 0.25]])
    x.reward_mean = None
    with pytest.raises(ValueError, match="AdvInputs.reward_mean.*RunningMean"):
        running_mean(x, AlgoConfig())


def test_running_mean_state_updates_and_round_trips():
    b = RunningMean(0.9)
    assert b.value == 0.0  # before any update
    assert b.update(torch.tensor([1.0, 0.0, 1.0, 1.0])) == pytest.approx(0.75)  # first: the mean
    assert b.update(torch.tensor([0.0, 0.0])) == pytest.approx(0.9 * 0.75)  # .675
    assert b.update(torch.tensor([])) == pytest.approx(0.675)  # an empty batch changes nothing
    other = RunningMean(0.9)
    other.load_state_dict(b.state_dict())
    assert other.state_dict() == b.state_dict()
    assert other.update(torch.tensor([1.0])) == b.update(torch.tensor([1.0]))
    assert b.value == pytest.approx(0.9 * 0.675 + 0.1)  # .7075


def poise_inputs(rewards, group_ids, predictions):
    data = inputs(rewards, group_ids)
    data.probe_predictions = torch.tensor(predictions, dtype=torch.float64)
    return data


def test_poise_with_predictions_equal_to_rewards_is_rloo():
    # the trainer's bootstrap: the sibling mean of the rewards is rloo's leave-one-out baseline
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=g).tolist()
    groups = [0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 4]  # sizes 2, 3, 4, 2 and a group of one
    adv = poise(poise_inputs(rewards, groups, rewards), AlgoConfig())
    torch.testing.assert_close(adv, rloo(inputs(rewards, groups), AlgoConfig()), atol=1e-6, rtol=0)
    assert torch.equal(adv[-1], torch.zeros(3))  # a group of one: no siblings, no advantage


def test_poise_golden_cross_rollout_baseline():
    # group 0 (G=2): A_1 = r_1 - g_2 = 1 - 0.3, A_2 = r_2 - g_1 = 0 - 0.9
    # group 1 (G=3): b_i = mean of the other two predictions
    #   A = 1 - (0.2 + 0.6) / 2 = 0.6,  0 - (0.4 + 0.6) / 2 = -0.5,  1 - (0.4 + 0.2) / 2 = 0.7
    data = poise_inputs([1, 0, 1, 0, 1], [7, 7, 3, 3, 3], [0.9, 0.3, 0.4, 0.2, 0.6])
    adv = poise(data, AlgoConfig())
    expected = torch.tensor([0.7, -0.9, 0.6, -0.5, 0.7], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected, atol=1e-6, rtol=0)
    mask = torch.tensor([[1.0, 1, 0]] * 5)
    data.loss_mask = mask
    assert torch.equal(poise(data, AlgoConfig()) == 0, mask == 0)  # policy tokens only
    assert torch.equal(sibling_mean(torch.tensor([2.0, 4.0, 5.0]), torch.tensor([0, 0, 1])),
                       torch.tensor([4.0, 2.0, 0.0]))  # fmt: skip


def test_poise_needs_probe_predictions():
    assert poise.requires == ("probe_predictions",) and ADVANTAGES["poise"] is poise
    with pytest.raises(ValueError, match="probe_predictions"):
        poise(inputs([1, 0], [0, 0]), AlgoConfig())


def bandit_gradient(baseline: str, groups=20000, seed=0):
    """A softmax policy over 4 arms; each prompt gets G=2 pulls with Bernoulli(p_a) rewards, and
    the 'probe' predicts g(z) = p_a from a pull's own arm (a perfect, response-aware probe).
    Returns the exact gradient of the expected reward in the logits, the mean per-group
    REINFORCE estimate with the given baseline, and that mean's standard error."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.tensor([0.3, -0.2, 0.5, 0.0], requires_grad=True)
    p = torch.tensor([0.9, 0.2, 0.4, 0.7], dtype=torch.float64)
    pi = logits.detach().double().softmax(-1)
    exact = pi * (p - (pi * p).sum())  # d/dlogits sum_a pi_a p_a
    arms = torch.multinomial(pi, 2 * groups, replacement=True, generator=g)
    rewards = (torch.rand(2 * groups, generator=g, dtype=torch.float64) < p[arms]).double()
    group_ids = torch.arange(groups).repeat_interleave(2)
    data = AdvInputs(rewards, group_ids, torch.ones(2 * groups, 1), probe_predictions=p[arms])
    if baseline == "poise":
        adv = poise(data, AlgoConfig())[:, 0].double()
    else:  # the rollout's own prediction as its baseline: A_i = r_i - g(z_i)
        adv = rewards - p[arms]
    # per-row gradient of A_i log pi(a_i) in the logits: A_i (onehot(a_i) - pi)
    rows = adv[:, None] * (torch.nn.functional.one_hot(arms, 4).double() - pi)
    per_group = rows.view(groups, 2, 4).sum(1)  # a group's two pulls are not independent
    mean = per_group.mean(0) / 2
    return exact, mean, per_group.std(0) / 2 / groups**0.5


def test_poise_gradient_is_unbiased_and_a_self_feature_baseline_is_not():
    exact, estimate, se = bandit_gradient("poise")
    assert ((estimate - exact).abs() < 4 * se).all(), (estimate, exact, se)
    exact, biased, se = bandit_gradient("self")
    # E[(r - p_a) grad log pi(a)] = 0: the own-feature baseline removes the whole signal
    assert ((biased - exact).abs() > 10 * se).any(), (biased, exact, se)
    assert biased.abs().max() < 4 * se.max()


def test_broadcast_from_last_gives_each_thread_its_episodes_last_policy_token_advantage():
    advantages = torch.tensor([[0.0, 0.5, 0.75, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, -2.0, 0.0, 0.0]])
    loss_mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
    episodes = torch.tensor([0, 2, 2, 1])  # episode 1 trains nothing (e.g. masked as truncated)
    row_mask = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 1], [0, 1, 1]])
    out = broadcast_from_last(advantages, loss_mask, episodes, row_mask)
    assert out.tolist() == [
        [0.0, 0.75, 0.75],
        [0.0, 0.0, -2.0],
        [-2.0, -2.0, -2.0],
        [0.0, 0.0, 0.0],
    ]
    assert out.dtype == torch.float32


# ---------------------------------------------------------------- soft_bellman


BETA_1 = SoftQParams(beta=1.0)


def soft_row(mask, values, q_values, rewards=None, token_rewards=None):
    """Rows whose V and Q are `values` and `q_values` under BETA_1: against a reference whose
    normalisers and logprobs are 0, V is the old normaliser and Q the old logprob plus it."""
    x = inputs(rewards or [1.0] * len(mask), list(range(len(mask))), mask)
    x.old_normaliser = torch.tensor(values)
    x.old_logprobs = torch.tensor(q_values) - x.old_normaliser
    x.ref_normaliser = x.ref_logprobs = torch.zeros_like(x.old_normaliser)
    x.token_rewards = None if token_rewards is None else torch.tensor(token_rewards)
    return x


def test_soft_bellman_one_step_targets_skip_observations_and_end_on_the_reward():
    # lam 0, gamma 0.5. Row 0: policy columns 1, 2 and 4 (3 is an observation), reward 1, V
    # [.1, .2, .3, .4, .5]: column 1 -> 0.5 V(col 2) = .15, column 2 -> 0.5 V(col 4) = .25 (the
    # state after the observation), column 4 -> the reward alone. Row 1: no policy token. Row
    # 2: one policy token, reward 0.7 -> 0.7
    x = soft_row(
        [[0, 1, 1, 0, 1], [0] * 5, [1, 0, 0, 0, 0]], [[0.1, 0.2, 0.3, 0.4, 0.5]] * 3,
        [[9.0] * 5] * 3, rewards=[1.0, 1.0, 0.7],
    )  # fmt: skip
    targets = soft_bellman(x, AlgoConfig(gamma=0.5, lam=0.0), params=BETA_1)
    expected = [[0, 0.15, 0.25, 0, 1.0], [0] * 5, [0.7, 0, 0, 0, 0]]
    torch.testing.assert_close(targets, torch.tensor(expected), rtol=0, atol=1e-7)


def test_soft_bellman_lambda_returns_subtract_the_later_tokens_log_ratios():
    # Policy columns 0, 1, 3; reward 1 on column 3, a turn reward 0.2 on column 1. V = [.5,
    # -.3, 9, .4], Q = [.7, -.1, 9, .6], so beta log(pi / pi_ref) = Q - V = .2 at columns 1
    # and 3. gamma 1, lam 0.5:
    #   G_3 = 1
    #   G_1 = 0.2 + V_3 + 0.5 (G_3 - Q_3) = 0.2 + 0.4 + 0.5 * 0.4 = 0.8
    #   G_0 = 0 + V_1 + 0.5 (G_1 - Q_1) = -0.3 + 0.5 * 0.9 = 0.15
    # lam 1: G_1 = 0.2 + 1 - 0.2 = 1.0 (rewards to go minus the later log-ratio), G_0 = 1.2 -
    # 0.2 - 0.2 = 0.8
    x = soft_row(
        [[1, 1, 0, 1]], [[0.5, -0.3, 9.0, 0.4]], [[0.7, -0.1, 9.0, 0.6]], [1.2],
        token_rewards=[[0.0, 0.2, 0.0, 1.0]],
    )  # fmt: skip
    half = soft_bellman(x, AlgoConfig(lam=0.5), params=BETA_1)
    torch.testing.assert_close(half, torch.tensor([[0.15, 0.8, 0, 1.0]]), rtol=0, atol=1e-7)
    full = soft_bellman(x, AlgoConfig(lam=1.0), params=BETA_1)
    torch.testing.assert_close(full, torch.tensor([[0.8, 1.0, 0, 1.0]]), rtol=0, atol=1e-7)


def test_soft_bellman_reads_v_and_q_off_the_normalisers_with_its_beta():
    # One row, two policy tokens, reward 1 on the last; at column 1 the old normaliser is 3,
    # the reference's 1, the sampled token's logprob -1 (old) and -.5 (reference):
    #   beta .5: V_1 = .5 (3 - 1) = 1, Q_1 = .5 (-1 + 3 + .5 - 1) = .75
    #   beta 1:  V_1 = 2, Q_1 = 1.5
    # gamma 1; lam 0: G_0 = V_1; lam 1: G_0 = V_1 + (G_1 - Q_1) with G_1 = 1.
    x = inputs([1.0], [0], [[1, 1]])
    x.old_normaliser, x.ref_normaliser = torch.tensor([[2.0, 3.0]]), torch.tensor([[1.0, 1.0]])
    x.old_logprobs, x.ref_logprobs = torch.tensor([[-2.0, -1.0]]), torch.tensor([[-2.0, -0.5]])
    for beta, one_step, full in [(0.5, 1.0, 1.25), (1.0, 2.0, 1.5)]:
        params = SoftQParams(beta=beta)
        got = soft_bellman(x, AlgoConfig(lam=0.0), params=params)
        torch.testing.assert_close(got, torch.tensor([[one_step, 1.0]]), rtol=0, atol=0)
        got = soft_bellman(x, AlgoConfig(lam=1.0), params=params)
        torch.testing.assert_close(got, torch.tensor([[full, 1.0]]), rtol=0, atol=0)


def test_soft_bellman_names_its_missing_field():
    x = soft_row([[1, 1]], [[0.1, 0.2]], [[0.3, 0.4]])
    x.ref_normaliser = None
    with pytest.raises(ValueError, match="AdvInputs.ref_normaliser"):
        soft_bellman(x, AlgoConfig(), params=SoftQParams())


def test_raft_is_the_reward_on_every_policy_token():
    x = inputs([1.0, 0.0, 0.5], [0, 0, 1], [[1, 1, 0], [1, 1, 1], [0, 1, 1]])
    expected = [[1, 1, 0], [0, 0, 0], [0, 0.5, 0.5]]
    torch.testing.assert_close(raft(x, AlgoConfig()), torch.tensor(expected))
