"""The episode runner: drives Envs with an Engine, `group_size` episodes per problem, into Trajectories."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

from rlvr.envs.base import Env
from rlvr.rollout.engine import Completion, Engine, SamplingParams, sample_seed
from rlvr.types import Message, Problem, StepResult, Trajectory


def render(
    tokenizer: PreTrainedTokenizerBase, messages: list[Message], generation_prompt: bool
) -> str:
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )


def encode_prompt(tokenizer: PreTrainedTokenizerBase, messages: list[Message]) -> list[int]:
    """Token ids of a conversation ready for the assistant to reply (the template adds BOS if any)."""
    return tokenizer(render(tokenizer, messages, True), add_special_tokens=False)["input_ids"]


@dataclass
class Episode:
    problem: Problem
    group_id: int
    sample_index: int
    env: Env
    messages: list[Message]
    token_ids: list[int]
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    finish_reason: str = "eos"
    done: bool = False

    def __post_init__(self):
        self.loss_mask = [0] * len(self.token_ids)
        self.logprobs = [0.0] * len(self.token_ids)

    def to_trajectory(self) -> Trajectory:
        return Trajectory(
            problem=self.problem,
            group_id=self.group_id,
            sample_index=self.sample_index,
            token_ids=self.token_ids,
            loss_mask=self.loss_mask,
            behaviour_logprobs=self.logprobs,
            turn_rewards=self.rewards,
            turn_ends=self.turn_ends,
            status=self.info.get("status", "ok"),
            correct=bool(self.info.get("correct", False)),
            finish_reason=self.finish_reason,
            response_text="".join(self.texts),
            info=self.info,
        )


class EpisodeRunner:
    """Runs every episode turn by turn in lock-step batches. Each turn generates in chunks of
    `chunk_size` episodes (None: one engine call) and steps the envs of a chunk on `workers`
    threads while the next chunk generates, so slow rewards (sandboxed code, reward models)
    overlap with generation."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: PreTrainedTokenizerBase,
        make_env: Callable[[], Env],
        params: SamplingParams,
        max_turns: int = 1,
        chunk_size: int | None = None,
        workers: int = 1,
    ):
        self.engine, self.tokenizer, self.make_env = engine, tokenizer, make_env
        self.params, self.max_turns, self.chunk_size = params, max_turns, chunk_size
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="env-step")
        # seconds in the engine, and waiting for env steps after generation ended; last collect
        self.timings: dict[str, float] = {}

    def collect(
        self,
        problems: Sequence[Problem],
        group_size: int,
        seed: Sequence[int],
        params: SamplingParams | None = None,
    ) -> list[Trajectory]:
        """Trajectories ordered problem by problem, `group_size` each; sample i of the call is
        seeded from (*seed, i, turn), so the same call always samples the same tokens."""
        params = params or self.params
        self.timings = {"generate": 0.0, "env": 0.0}
        episodes = []
        for group_id, problem in enumerate(problems):
            for _ in range(group_size):
                env = self.make_env()
                messages = env.reset(problem)
                ids = encode_prompt(self.tokenizer, messages)
                episodes.append(Episode(problem, group_id, len(episodes), env, messages, ids))
        for turn in range(self.max_turns):
            active = [e for e in episodes if not e.done]
            if not active:
                break
            steps = []
            size = self.chunk_size or len(active)
            for chunk in (active[i : i + size] for i in range(0, len(active), size)):
                seeds = [sample_seed(*seed, e.sample_index, turn) for e in chunk]
                start = time.perf_counter()
                completions = self.engine.generate([e.token_ids for e in chunk], params, seeds)
                self.timings["generate"] += time.perf_counter() - start
                for episode, completion in zip(chunk, completions):
                    steps.append(
                        (episode, completion, self.pool.submit(episode.env.step, completion.text))
                    )
            start = time.perf_counter()
            for episode, completion, step in steps:
                self._record(
                    episode, completion, step.result(), last_turn=turn == self.max_turns - 1
                )
            self.timings["env"] += time.perf_counter() - start
        return [e.to_trajectory() for e in episodes]

    def _record(
        self, episode: Episode, completion: Completion, result: StepResult, last_turn: bool
    ) -> None:
        episode.token_ids = episode.token_ids + completion.token_ids
        episode.loss_mask = episode.loss_mask + [1] * len(completion.token_ids)
        episode.logprobs = episode.logprobs + completion.logprobs
        episode.turn_ends.append(len(episode.token_ids))
        episode.texts.append(completion.text)
        episode.finish_reason = completion.finish_reason
        episode.rewards.append(float(result.reward))
        episode.info.update(result.info)
        episode.done = result.done or last_turn
        if not episode.done:
            self._append_observation(episode, completion.token_ids, result.observation or "")

    def _append_observation(self, episode: Episode, reply_ids: list[int], observation: str) -> None:
        """Observation tokens are whatever the template adds after the policy's own tokens (closing
        a truncated reply included); they are never trained on."""
        before = render(self.tokenizer, episode.messages, True) + self.tokenizer.decode(reply_ids)
        reply = self.tokenizer.decode(reply_ids, skip_special_tokens=True)
        episode.messages = episode.messages + [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": observation},
        ]
        after = render(self.tokenizer, episode.messages, True)
        if not after.startswith(before):
            raise ValueError(
                "the chat template is not append-only; multi-turn episodes need one that is"
            )
        ids = self.tokenizer(after[len(before) :], add_special_tokens=False)["input_ids"]
        episode.token_ids = episode.token_ids + ids
        episode.loss_mask = episode.loss_mask + [0] * len(ids)
        episode.logprobs = episode.logprobs + [0.0] * len(ids)
