"""Partial rollouts: a pool of episodes that generate in segments of a few tokens, take newer
weights between segments, and leave as whole groups the moment a group finishes; unfinished
groups carry over to the next batch and continue under whatever weights are newest then."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from rlvr.rollout.engine import Completion, sample_seed
from rlvr.rollout.runner import Episode, EpisodeRunner, safe_step
from rlvr.rollout.tokens import Conversation
from rlvr.types import Problem, Trajectory


@dataclass
class Pending:
    """One episode mid-generation: the tokens of its current reply so far, and the version that
    sampled each of its policy tokens (earlier replies included)."""

    episode: Episode
    seed: tuple[int, ...]  # the seed of the batch it came in with: older batches leave first
    group_size: int
    reply_ids: list[int] = field(default_factory=list)
    reply_logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turn: int = 0
    segment: int = 0

    @property
    def key(self) -> tuple:
        return self.seed, self.episode.group_id


class PartialRunner(EpisodeRunner):
    """Episodes admitted batch by batch; `advance` generates every unfinished one a segment at a
    time until `need` groups are finished, and returns the oldest finished groups. `admit` may be
    called from another thread while `advance` runs: admitted groups join at the next segment."""

    def __init__(self, *args, segment_tokens: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.segment_tokens = segment_tokens
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()  # batches admitted, not yet pending
        self.pending: list[Pending] = []
        self.finished: dict[tuple, list[Trajectory]] = {}  # whole groups ready to leave
        self.admitted: set[tuple] = set()  # batch seeds seen: a batch is admitted once
        self.lock = threading.Lock()

    def admit(
        self,
        problems: Sequence[Problem],
        group_size: int,
        seed: Sequence[int],
        group_ids: Sequence[int],
    ) -> None:
        """Add a batch's groups (problem i is group `group_ids[i]` of its batch), numbered and
        seeded exactly as EpisodeRunner.collect would; a batch seed seen before is ignored, so
        the same admission may arrive by two paths."""
        with self.lock:
            if tuple(seed) in self.admitted:
                return
            self.admitted.add(tuple(seed))
        self.inbox.put((list(problems), group_size, tuple(seed), list(group_ids)))

    def _take_admitted(self, wait: bool) -> None:
        while wait or not self.inbox.empty():
            problems, group_size, seed, group_ids = self.inbox.get()
            self._start(problems, group_size, seed, group_ids)
            wait = False

    def _start(self, problems, group_size, seed, group_ids) -> None:
        for problem, group_id in zip(problems, group_ids):
            for member in range(group_size):
                env = self.make_env()
                tools = getattr(env, "tool_schemas", None)
                conversation = Conversation(self.tokenizer, env.reset(problem), tools=tools)
                episode = Episode(problem, group_id, group_id * group_size + member, env,
                                  conversation)  # fmt: skip
                self.pending.append(Pending(episode, seed, group_size))

    def advance(self, need: int, version: Callable[[], int]) -> list[list[Trajectory]]:
        """Generate until at least `need` groups are finished; return the `need` oldest. Before
        each segment `version()` loads any newer weights and names the version now in use."""
        self.timings = {"generate": 0.0, "env": 0.0}
        while True:
            self._take_admitted(wait=False)
            for p in self.pending:
                if not p.episode.done and not p.reply_ids and self._room(p.episode) <= 0:
                    p.episode.end("max_tokens")  # the prompt alone fills the budget
            self._collect_finished()
            active = [p for p in self.pending if not p.episode.done]
            if len(self.finished) >= need:
                break
            if not active:  # this request's batch is not admitted yet
                self._take_admitted(wait=True)
                continue
            self._segment(active, version())
        keys = sorted(self.finished)[:need]
        return [self.finished.pop(key) for key in keys]

    def _segment(self, active: list[Pending], version: int) -> None:
        start = time.perf_counter()
        # a reply's first segment is seeded as EpisodeRunner seeds the whole reply
        seeds = [
            sample_seed(
                *p.seed, p.episode.sample_index, p.turn, *([p.segment] if p.segment else [])
            )
            for p in active
        ]
        prompts = [p.episode.conversation.token_ids + p.reply_ids for p in active]
        segment = min(self.segment_tokens, self.params.max_new_tokens)
        params = replace(self.params, max_new_tokens=segment)
        completions = self.engine.generate(prompts, params, seeds)
        self.timings["generate"] += time.perf_counter() - start
        start = time.perf_counter()
        for p, completion in zip(active, completions):
            budget = min(self.params.max_new_tokens, self._room(p.episode)) - len(p.reply_ids)
            ids = completion.token_ids[:budget]
            p.reply_ids += ids
            p.reply_logprobs += completion.logprobs[: len(ids)]
            p.versions += [version] * len(ids)
            p.segment += 1
            ended = completion.finish_reason != "length" and len(ids) == len(completion.token_ids)
            if ended or len(ids) == budget:
                self._end_reply(p, completion.finish_reason if ended else "length")
        self.timings["env"] += time.perf_counter() - start

    def _end_reply(self, p: Pending, finish_reason: str) -> None:
        text = self.tokenizer.decode(p.reply_ids, skip_special_tokens=True)
        completion = Completion(p.reply_ids, p.reply_logprobs, finish_reason, text)
        self._record(p.episode, completion, safe_step(p.episode.env, text), p.turn)
        p.reply_ids, p.reply_logprobs, p.turn, p.segment = [], [], p.turn + 1, 0

    def _collect_finished(self) -> None:
        groups: dict[tuple, list[Pending]] = {}
        for p in self.pending:
            groups.setdefault(p.key, []).append(p)
        for key, members in groups.items():
            if all(p.episode.done for p in members):
                self.finished[key] = [self._trajectory(p) for p in members]
        self.pending = [p for p in self.pending if p.key not in self.finished]

    @staticmethod
    def _trajectory(p: Pending) -> Trajectory:
        trajectory = p.episode.to_trajectory()
        policy_tokens = iter(p.versions)
        trajectory.versions = [next(policy_tokens) if m else -1 for m in trajectory.loss_mask]
        trajectory.info["admitted"] = list(p.seed)
        return trajectory

    def unfinished_lengths(self) -> list[int]:
        """Tokens generated so far by each episode still in the pool (a lower bound on its length)."""
        return [len(p.versions) for p in self.pending]
