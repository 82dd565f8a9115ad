"""River's repetition penalty (algo.repetition_penalty_delta) as the trainer applies it."""

import torch

from rlvr.config import load_config
from rlvr.rollout.tokens import Conversation
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Trajectory


def one_step(overrides: list[str], capture=None) -> tuple[Trainer, dict]:
    trainer = Trainer(load_config(None, overrides))
    try:
        if capture is not None:
            capture(trainer)
        return trainer, trainer.step()
    finally:
        trainer.updater.close()
        trainer.source.close()


def test_single_turn_runs_are_unaffected(fast_overrides):
    plain, _ = one_step(fast_overrides)
    penalised, metrics = one_step([*fast_overrides, "algo.repetition_penalty_delta=0.05"])
    assert metrics["shaping/repeated_turns"] == 0.0
    for p, q in zip(plain.model.parameters(), penalised.model.parameters()):
        assert torch.equal(p, q)


def guessing_episode(tokenizer, turns: list[tuple[str, str]], reward: float, index: int):
    """A guess-the-number episode of (reply, feedback) turns laid out by the rollout's token
    layer (chat template tokens between turns); the last turn's feedback is not inserted."""
    problem = Problem(id="guess", prompt="Guess my number from 1 to 16.", answer="10")
    conversation = Conversation(tokenizer, problem.messages())
    for k, (reply, feedback) in enumerate(turns):
        ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        conversation.add_reply(ids)
        if k + 1 < len(turns):
            conversation.add_observation({"role": "user", "content": feedback})
    n, rewards = len(conversation.token_ids), [0.0] * (len(turns) - 1) + [reward]
    trajectory = Trajectory(
        problem, 0, index, conversation.token_ids, conversation.loss_mask, [0.0] * n, rewards,
        conversation.turn_ends,
    )  # fmt: skip
    trajectory.stamp(0)
    return trajectory


def test_repeated_turns_have_their_advantages_lowered(fast_overrides):
    seen = {}

    def rollout(trainer):
        tokenizer = trainer.tokenizer
        looping = [("guess 8", "higher"), ("guess 8", "higher"), ("guess 12", "lower"),
                   ("guess 8", "higher"), ("guess 8", "higher"), ("guess 10", "")]  # fmt: skip
        group = [
            guessing_episode(tokenizer, looping, 0.0, 0),  # turns 1 and 3 penalised, 4 capped
            guessing_episode(tokenizer, [("guess 8", "higher"), ("guess 10", "")], 1.0, 1),
            guessing_episode(tokenizer, [("guess 10", "")], 1.0, 2),
            # the same guess answered differently is no loop
            guessing_episode(
                tokenizer, [("guess 8", "higher"), ("guess 8", "lower"), ("guess 7", "")], 0.0, 3
            ),
        ]

        def sampled(timings):
            timings["time/generate"] = 1.0
            return group, None, {}

        trainer.rollout = sampled
        prepare = trainer.prepare_update

        def recording(batch, baselines, segments, components, timings, offsets=None, *rest):
            data, extra = prepare(batch, baselines, segments, components, timings, offsets, *rest)
            plain, _ = prepare(batch, baselines, segments, components, {}, None, *rest)
            seen.update(turn_ids=batch.turn_ids, shaped=data.advantages, plain=plain.advantages)
            return data, extra

        trainer.prepare_update = recording

    overrides = [
        *fast_overrides,
        "rollout.batch_size=4",
        "algo.repetition_penalty_delta=0.05",
        "algo.repetition_cap=0.1",
    ]
    _, metrics = one_step(overrides, rollout)
    turn_ids = seen["turn_ids"]
    expected = torch.zeros_like(seen["plain"])
    expected[0][(turn_ids[0] == 1) | (turn_ids[0] == 3)] = -0.05
    assert torch.allclose(seen["shaped"] - seen["plain"], expected, atol=1e-7)
    assert metrics["shaping/repeated_turns"] == 3 / 12
