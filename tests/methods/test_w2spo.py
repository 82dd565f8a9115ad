"""W2SPO's branch injection: a weak model's span inside the policy's reply, with the weak
model's logprobs on it, the policy's around it, and only the span trained."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.methods.w2spo import BranchingEngine, branch_metrics
from rlvr.models.logprobs import token_logprobs
from rlvr.models.tiny import build_model
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.tokens import Conversation, encode_prompt
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Trajectory

PARAMS = SamplingParams(24, 1.0)


@pytest.fixture(scope="module")
def weak_model(tokenizer):
    return build_model("nano", tokenizer, seed=1).eval()


def prompts_for(tokenizer, count):
    return [
        encode_prompt(tokenizer, [{"role": "user", "content": f"{i}+{i}="}]) for i in range(count)
    ]


def teacher_forced(model, context, tokens):
    ids = torch.tensor([context + tokens])
    logprobs, _ = token_logprobs(model, ids, torch.ones_like(ids), 1.0)
    return logprobs[0, len(context) - 1 :].detach()


def test_a_branch_is_the_weak_models_span_inside_the_policys_reply(
    tiny_model, weak_model, tokenizer
):
    policy = HFEngine(tiny_model, tokenizer)
    engine = BranchingEngine(policy, HFEngine(weak_model, tokenizer), tokenizer, 5, share=1.0)
    prompts, seeds = prompts_for(tokenizer, 6), list(range(100, 106))
    plain = policy.generate(prompts, PARAMS, seeds)
    branched = engine.generate(prompts, PARAMS, seeds)
    for prompt, own, out in zip(prompts, plain, branched):
        trained = out.trained
        start, span = trained.index(1), sum(trained)
        assert trained == [0] * start + [1] * span + [0] * (len(out.token_ids) - start - span)
        assert 1 <= span <= 5 and len(out.token_ids) <= PARAMS.max_new_tokens
        # before the branch: the policy's own sample, untouched
        assert out.token_ids[:start] == own.token_ids[:start]
        assert out.logprobs[:start] == own.logprobs[:start]
        # the span carries the weak model's logprobs, the rest the policy's
        weak = teacher_forced(weak_model, prompt, out.token_ids)
        mine = teacher_forced(tiny_model, prompt, out.token_ids)
        got = torch.tensor(out.logprobs)
        on = torch.tensor(trained, dtype=torch.bool)
        assert torch.allclose(got[on], weak[on], atol=1e-5)
        assert torch.allclose(got[~on], mine[~on], atol=1e-5)
        assert not torch.allclose(weak[on], mine[on], atol=1e-2)  # two different models
        assert out.text == tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_branches_follow_the_seeds_and_share_and_never_touch_greedy_calls(
    tiny_model, weak_model, tokenizer
):
    policy = HFEngine(tiny_model, tokenizer)

    def engine(share):
        return BranchingEngine(policy, HFEngine(weak_model, tokenizer), tokenizer, 4, share)

    prompts, seeds = prompts_for(tokenizer, 40), list(range(40))
    first = engine(0.3).generate(prompts, PARAMS, seeds)
    again = engine(0.3).generate(prompts, PARAMS, seeds)
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    plain = policy.generate(prompts, PARAMS, seeds)
    chosen = [i for i, c in enumerate(first) if c.trained is not None]
    assert 4 <= len(chosen) <= 20  # about 30% of 40
    # a branch cut near the end keeps the reply within its budget
    assert all(
        len(c.token_ids) <= PARAMS.max_new_tokens
        for c in engine(1.0).generate(prompts, PARAMS, seeds)
    )
    assert all(first[i].token_ids == plain[i].token_ids for i in range(40) if i not in chosen)
    greedy = SamplingParams(12, 0.0)
    assert [c.token_ids for c in engine(1.0).generate(prompts[:4], greedy)] == [
        c.token_ids for c in policy.generate(prompts[:4], greedy)
    ]


def trajectory(correct: bool, mask: list[int], branched: bool) -> Trajectory:
    info = {"branched": True} if branched else {}
    n = len(mask)
    return Trajectory(
        Problem(id="p", prompt="q", answer="a"), 0, 0, list(range(n)), mask, [0.0] * n,
        [float(correct)], [n], correct=correct, info=info,
    )  # fmt: skip


def test_branch_metrics_by_hand():
    trajectories = [
        trajectory(True, [0, 0, 1, 1, 0], True),
        trajectory(False, [0, 1, 1, 1, 0, 0], True),
        trajectory(True, [0, 1, 1], False),
        trajectory(False, [0, 1], False),
    ]
    assert branch_metrics(trajectories) == {
        "branch/share": 0.5,
        "branch/accuracy": 0.5,
        "branch/inserted_tokens": 2.5,
        "branch/unbranched_accuracy": 0.5,
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "algo.tis=token"),  # off by default
        (["algo.tis=token", "distributed.backend=ray"], "drop distributed.backend=ray"),
        (["algo.tis=token", "rollout.tree_width=2", "algo.advantage=tree"], "rollout.tree_width"),
    ],
)
def test_branching_needs_importance_weights_and_the_in_process_rollout(overrides, message):
    with pytest.raises(ConfigError, match=message):  # before any model is loaded
        build_components(load_config(None, ["methods.w2spo.model=some/model", *overrides]))


def test_a_training_step_trains_only_the_weak_spans(
    fast_overrides, weak_model, tokenizer, tmp_path
):
    weak_dir = tmp_path / "weak"
    weak_model.save_pretrained(weak_dir)
    tokenizer.save_pretrained(weak_dir)
    cfg = load_config(None, [
        *fast_overrides, f"methods.w2spo.model={weak_dir}", "methods.w2spo.tokens=3",
        "methods.w2spo.share=1.0", "algo.tis=token", "train.steps=1",
    ])  # fmt: skip
    trainer = Trainer(cfg)
    try:
        sampled = trainer.sample()
        branched = [t for t in sampled.trajectories if t.info.get("branched")]
        assert len(branched) >= 12  # of 16: all but replies of a single token
        assert all(1 <= sum(t.loss_mask) <= 3 for t in branched)
        for t in sampled.trajectories:  # generated counts the whole reply, trained or not
            prompt = encode_prompt(tokenizer, t.problem.messages())
            assert t.num_generated == len(t.token_ids) - len(prompt)
        assert sampled.metrics["branch/share"] == len(branched) / 16
        metrics = trainer.learn(sampled)
        assert "mismatch/truncated_share" in metrics and torch.isfinite(
            torch.tensor(metrics["loss"])
        )
        eval_metrics = trainer.evaluate()  # eval samples the policy alone
        assert "branch/share" not in eval_metrics
    finally:
        trainer.close()


def test_a_branched_reply_counts_every_token_it_generated(tiny_model, weak_model, tokenizer):
    engine = BranchingEngine(
        HFEngine(tiny_model, tokenizer), HFEngine(weak_model, tokenizer), tokenizer, 3, 1.0
    )
    messages = [{"role": "user", "content": "1+1="}]
    completion = engine.generate([encode_prompt(tokenizer, messages)], PARAMS, [7])[0]
    conversation = Conversation(tokenizer, messages)
    conversation.add_reply(completion.token_ids, completion.logprobs, completion.trained)
    assert sum(conversation.loss_mask) == sum(completion.trained) <= 3
    assert conversation.untrained == len(completion.token_ids) - sum(completion.trained) > 0
