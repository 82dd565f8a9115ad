"""The episode runner: drives Envs with an Engine, `group_size` episodes per problem, into Trajectories."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

from rlvr.envs.base import Env
from rlvr.rollout.engine import Completion, Engine, SamplingParams, sample_seed
from rlvr.rollout.tokens import Conversation
from rlvr.rollout.weight_noise import WeightNoise, weight_sample_of
from rlvr.types import Message, Problem, SideRow, StepResult, Trajectory

WEIGHT_NOISE_STREAM = 7  # seeds 3PO's weight draws apart from the replies' own sampling seeds

# Why an episode ended: the env said done, or a budget ran out, or the env failed.
ENDINGS = ("done", "max_turns", "max_tokens", "env_error")


@dataclass
class Episode:
    problem: Problem
    group_id: int
    sample_index: int
    env: Env
    conversation: Conversation
    rewards: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    side_rows: list[SideRow] = field(default_factory=list)
    finish_reason: str = "eos"
    done: bool = False

    def end(self, reason: str) -> None:
        self.done = True
        self.info["ended_by"] = reason

    def to_trajectory(self) -> Trajectory:
        c = self.conversation
        return Trajectory(
            problem=self.problem,
            group_id=self.group_id,
            sample_index=self.sample_index,
            token_ids=c.token_ids,
            loss_mask=c.loss_mask,
            behaviour_logprobs=c.logprobs,
            turn_rewards=self.rewards,
            turn_ends=c.turn_ends,
            status=self.info.get("status", "ok"),
            correct=bool(self.info.get("correct", False)),
            finish_reason=self.finish_reason,
            response_text="".join(self.texts),
            info=self.info,
            untrained_tokens=c.untrained,
            side_rows=self.side_rows,
        )


def safe_step(env: Env, action_text: str) -> StepResult:
    """env.step, with an env that raises ending its episode as a crash instead of the run."""
    try:
        return env.step(action_text)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        return StepResult(None, 0.0, True, {"status": "crash", "error": error, "env_error": True})


class EpisodeRunner:
    """Runs every episode turn by turn in lock-step batches. Each turn generates in chunks of
    `chunk_size` episodes (None: one engine call) and steps the envs of a chunk on `workers`
    threads while the next chunk generates, so slow rewards (sandboxed code, reward models)
    overlap with generation.

    Budgets: at most `max_turns` policy turns and, when `max_total_tokens` > 0, that many
    tokens in the whole episode (prompt and observations included). A turn generates at most
    `params.max_new_tokens`; observation tokens never count against that per-turn budget.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: PreTrainedTokenizerBase,
        make_env: Callable[[], Env],
        params: SamplingParams,
        max_turns: int = 1,
        chunk_size: int | None = None,
        workers: int = 1,
        max_total_tokens: int = 0,
    ):
        self.engine, self.tokenizer, self.make_env = engine, tokenizer, make_env
        self.params, self.max_turns, self.chunk_size = params, max_turns, chunk_size
        self.max_total_tokens = max_total_tokens
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="env-step")
        # seconds in the engine, and waiting for env steps after generation ended; last collect
        self.timings: dict[str, float] = {}
        self.stats: dict[str, float] = {}  # sampling costs a runner reports (tree rollouts)

    def collect(
        self,
        problems: Sequence[Problem],
        group_size: int,
        seed: Sequence[int],
        params: SamplingParams | None = None,
        first_group: int = 0,
        noise: WeightNoise | None = None,
    ) -> list[Trajectory]:
        """Trajectories ordered problem by problem, `group_size` each; sample i of the call is
        seeded from (*seed, i, turn), so the same call always samples the same tokens. Groups
        and samples are numbered from `first_group`: a share of a batch collected elsewhere
        (another rollout worker) samples exactly what the whole batch would. With `noise`
        (3PO), each group's replies split over noise.samples weight draws, seeded from seed."""
        params = params or self.params
        self.timings = {"generate": 0.0, "env": 0.0}
        episodes = []
        for group_id, problem in enumerate(problems, start=first_group):
            for _ in range(group_size):
                env = self.make_env()
                tools = getattr(env, "tool_schemas", None)
                conversation = Conversation(self.tokenizer, env.reset(problem), tools=tools)
                index = first_group * group_size + len(episodes)
                episodes.append(Episode(problem, group_id, index, env, conversation))
        for turn in range(self.max_turns):
            for episode in episodes:
                if not episode.done and self._room(episode) <= 0:
                    episode.end("max_tokens")  # the prompt alone fills the budget
            active = [e for e in episodes if not e.done]
            if not active:
                break
            steps = []
            size = self.chunk_size or len(active)
            for chunk in (active[i : i + size] for i in range(0, len(active), size)):
                seeds = [sample_seed(*seed, e.sample_index, turn) for e in chunk]
                start = time.perf_counter()
                prompts = [e.conversation.token_ids for e in chunk]
                if noise is None:
                    completions = self.engine.generate(prompts, params, seeds)
                else:
                    draws = [
                        weight_sample_of(e.sample_index, group_size, noise.samples) for e in chunk
                    ]
                    completions = self._generate_per_draw(
                        prompts, params, seeds, draws, noise, seed
                    )
                self.timings["generate"] += time.perf_counter() - start
                for episode, completion in zip(chunk, completions):
                    completion = self._within_budget(episode, completion)
                    step = self.pool.submit(safe_step, episode.env, completion.text)
                    steps.append((episode, completion, step))
            start = time.perf_counter()
            for episode, completion, step in steps:
                self._record(episode, completion, step.result(), turn)
            self.timings["env"] += time.perf_counter() - start
        return [e.to_trajectory() for e in episodes]

    def _generate_per_draw(self, prompts, params, seeds, draws, noise, seed) -> list[Completion]:
        """One engine call per weight draw, each under its weights; completions in prompt order."""
        completions: list = [None] * len(prompts)
        for draw in sorted(set(draws)):
            rows = [i for i, d in enumerate(draws) if d == draw]
            with noise.sampled(sample_seed(*seed, draw, WEIGHT_NOISE_STREAM)):
                drawn = self.engine.generate(
                    [prompts[i] for i in rows], params, [seeds[i] for i in rows]
                )
            for i, completion in zip(rows, drawn):
                completions[i] = completion
        return completions

    def _room(self, episode: Episode) -> int:
        """Tokens the episode may still generate under max_total_tokens (a large number if none)."""
        if not self.max_total_tokens:
            return 1 << 30
        return self.max_total_tokens - len(episode.conversation.token_ids)

    def _within_budget(self, episode: Episode, completion: Completion) -> Completion:
        """The completion cut to what the episode's total-token budget has left."""
        room = self._room(episode)
        if len(completion.token_ids) <= room:
            return completion
        ids = completion.token_ids[:room]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        trained = None if completion.trained is None else completion.trained[:room]
        return Completion(
            ids, completion.logprobs[:room], "length", text, trained, completion.side_rows
        )

    def _record(
        self, episode: Episode, completion: Completion, result: StepResult, turn: int
    ) -> None:
        episode.conversation.add_reply(
            completion.token_ids, completion.logprobs, completion.trained
        )
        episode.texts.append(completion.text)
        episode.finish_reason = completion.finish_reason
        if completion.side_rows is not None:  # each trained on the context it was sampled in
            episode.side_rows += completion.side_rows
        elif completion.trained is not None:  # trains on part of itself: a W2SPO branch
            episode.info["branched"] = True
        episode.rewards.append(float(result.reward))
        tool_calls = result.info.get("tool_calls", 0) + episode.info.get("tool_calls", 0)
        tool_errors = result.info.get("tool_errors", 0) + episode.info.get("tool_errors", 0)
        episode.info.update(result.info, tool_calls=tool_calls, tool_errors=tool_errors)
        if result.info.get("env_error"):
            episode.end("env_error")
        elif result.done:
            episode.end("done")
        elif turn == self.max_turns - 1:
            episode.end("max_turns")
        elif not episode.conversation.add_observation(
            _as_message(result.observation), self.max_total_tokens
        ):
            episode.end("max_tokens")  # no room left for the next reply


def _as_message(observation: str | Message | list[Message] | None) -> Message | list[Message]:
    """A bare string observation is a user turn; envs may also give messages (e.g. role 'tool')."""
    if observation is None or isinstance(observation, str):
        return {"role": "user", "content": observation or ""}
    return observation
