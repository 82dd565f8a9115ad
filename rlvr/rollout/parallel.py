"""Parason's parallel-thread grammar: parse a trace into a thread tree, measure its critical path,
and roll out its parallel regions as sibling threads that share the prefix but not each other.

A trace is sequential text with `<Parallel>` regions. A region opens with `<Outlines>` holding
one `<Subtask>` (all threads needed) or `<Trial>` (speculative) per thread, then that many
`<Thread>` blocks, each itself a trace (regions nest), then `</Parallel>`. Run in parallel, the
trace takes as long as its critical path: the sequential tokens plus, per region, its outlines
and its longest thread.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlvr.rollout.engine import Completion, Engine, SamplingParams, sample_seed
from rlvr.tasks.thread_tags import TAGS
from rlvr.types import SideRow

_TAG = re.compile(r"<(/?)(" + "|".join(TAGS) + r")>")

Counter = Callable[[int, int], int]  # tokens in the trace's characters [start, end)


class TraceError(ValueError):
    """A trace that breaks the grammar; the message says where and how."""


@dataclass
class Thread:
    kind: str  # "subtask" | "trial", from its outline
    span: tuple[int, int]  # characters of "<Thread>...</Thread>"
    regions: list[Region] = field(default_factory=list)  # nested regions, in order


@dataclass
class Region:
    span: tuple[int, int]  # characters of "<Parallel>...</Parallel>"
    threads: list[Thread]


@dataclass
class ThreadTree:
    """A parsed trace: its length in characters and its top-level parallel regions."""

    length: int
    regions: list[Region]


@dataclass(frozen=True)
class TraceStats:
    total_tokens: int
    critical_path_tokens: int
    acceleration: float  # total / critical path: 1.0 for a sequential trace
    parallel_ratio: float  # share of the tokens inside threads
    subtask_ratio: float  # share inside subtask threads (a nested thread counts as its own kind)
    trial_ratio: float
    regions: int  # parallel regions, nested ones included
    well_formed: bool


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tags = [
            (m.start(), m.end(), m.group(1) == "/", m.group(2)) for m in _TAG.finditer(text)
        ]
        self.at = 0  # index into self.tags

    def fail(self, why: str) -> TraceError:
        where = self.tags[self.at][0] if self.at < len(self.tags) else len(self.text)
        return TraceError(f"{why} at character {where}")

    def peek(self) -> tuple[bool, str] | None:
        return self.tags[self.at][2:] if self.at < len(self.tags) else None

    def take(self, closing: bool, name: str) -> tuple[int, int]:
        if self.peek() != (closing, name):
            raise self.fail(f"expected <{'/' if closing else ''}{name}>")
        start, end = self.tags[self.at][:2]
        self.at += 1
        return start, end

    def trace(self, closing: str | None) -> list[Region]:
        """Regions up to the tag that closes this level (`</closing>`, or the end)."""
        regions = []
        while (tag := self.peek()) is not None:
            if tag == (True, closing):
                return regions
            if tag != (False, "Parallel"):
                raise self.fail(f"<{'/' if tag[0] else ''}{tag[1]}> outside its block")
            regions.append(self.region())
        if closing is not None:
            raise self.fail(f"unclosed <{closing}>")
        return regions

    def region(self) -> Region:
        start, end = self.take(False, "Parallel")
        end = self.after(end, False, "Outlines")
        kinds = []
        while (tag := self.peek()) in ((False, "Subtask"), (False, "Trial")):
            end = self.after(end, False, tag[1])
            end = self.take(True, tag[1])[1]  # the outline's own text is free
            kinds.append(tag[1].lower())
        if not kinds:
            raise self.fail("<Outlines> without a <Subtask> or <Trial>")
        end = self.after(end, True, "Outlines")
        threads = []
        for kind in kinds:
            opened, _ = self.take(False, "Thread")
            self.gap(end, opened)
            regions = self.trace("Thread")
            end = self.take(True, "Thread")[1]
            threads.append(Thread(kind, (opened, end), regions))
        if self.peek() == (False, "Thread"):
            raise self.fail(f"more <Thread> blocks than the {len(kinds)} outlined")
        end = self.after(end, True, "Parallel")
        return Region((start, end), threads)

    def after(self, end: int, closing: bool, name: str) -> int:
        """Take the tag expected next, with only whitespace since `end`; return where it ends."""
        opened, closed = self.take(closing, name)
        self.gap(end, opened)
        return closed

    def gap(self, start: int, end: int) -> None:
        """Between the structural tags of a region only whitespace may stand."""
        if self.text[start:end].strip():
            raise TraceError(f"text {self.text[start:end].strip()[:20]!r} at character {start} "
                             "between the tags of a <Parallel> block")  # fmt: skip


def parse_trace(text: str) -> ThreadTree:
    """The thread tree of `text`; raises TraceError naming the first place it breaks the grammar."""
    parser = _Parser(text)
    return ThreadTree(len(text), parser.trace(None))


def _critical(span: tuple[int, int], regions: list[Region], count: Counter) -> int:
    """Tokens on the longest path through `span`: everything outside its regions, and per
    region everything outside its threads plus its longest thread."""
    tokens = count(*span)
    for region in regions:
        inside = sum(count(*t.span) for t in region.threads)
        longest = max(_critical(t.span, t.regions, count) for t in region.threads)
        tokens += longest - inside
    return tokens


def _kind_tokens(regions: list[Region], count: Counter, into: dict[str, int]) -> int:
    """Add each thread's own tokens (not its nested threads') to into[kind]; return the number
    of regions, nested ones included."""
    found = 0
    for region in regions:
        found += 1
        for thread in region.threads:
            nested = sum(count(*t.span) for r in thread.regions for t in r.threads)
            into[thread.kind] += count(*thread.span) - nested
            found += _kind_tokens(thread.regions, count, into)
    return found


def characters(start: int, end: int) -> int:
    return end - start


def token_counter(offsets: Sequence[tuple[int, int]]) -> Counter:
    """A Counter from a tokenizer's offset mapping of the whole trace: a token belongs to the
    span its first character lies in, so spans add up to the whole tokenisation exactly."""
    starts = sorted(start for start, end in offsets if end > start)
    return lambda start, end: bisect_left(starts, end) - bisect_left(starts, start)


def trace_stats(text: str, count: Counter = characters) -> TraceStats:
    """Token totals and structure shares of `text` under `count`; a trace that breaks the grammar
    is measured as sequential (acceleration 1) and marked not well formed."""
    total = count(0, len(text))
    try:
        tree = parse_trace(text)
    except TraceError:
        return TraceStats(total, total, 1.0, 0.0, 0.0, 0.0, 0, False)
    kinds = {"subtask": 0, "trial": 0}
    regions = _kind_tokens(tree.regions, count, kinds)
    critical = _critical((0, len(text)), tree.regions, count)
    share = (lambda tokens: tokens / total) if total else (lambda tokens: 0.0)
    return TraceStats(
        total_tokens=total,
        critical_path_tokens=critical,
        acceleration=total / critical if critical else 1.0,
        parallel_ratio=share(kinds["subtask"] + kinds["trial"]),
        subtask_ratio=share(kinds["subtask"]),
        trial_ratio=share(kinds["trial"]),
        regions=regions,
        well_formed=True,
    )


def blind_threads(text: str) -> list[tuple[str, str]]:
    """(context, thread) for each thread after the first of every top-level region of a well-
    formed trace: the text before the region's first thread, and the thread as written. That
    context is all a dispatched thread sees, so training on these pairs as well as on the whole
    trace makes siblings blind to each other (the paper's prefix-tree attention mask, as
    separate sequences); the first thread already sees only it."""
    try:
        regions = parse_trace(text).regions
    except TraceError:
        return []
    return [
        (text[: region.threads[0].span[0]], text[slice(*thread.span)])
        for region in regions
        for thread in region.threads[1:]
    ]


@dataclass
class ParallelEpisode:
    """One prompt's trace generated with its parallel regions dispatched as sibling threads."""

    token_ids: list[int]  # the assembled response: main path with the threads in place
    text: str
    finish_reason: str
    threads: int  # threads dispatched
    # aligned with token_ids: the sampler's logprob (0 on what the dispatcher wrote), and 1 on
    # the tokens generated with exactly this prefix as context (the main path and each region's
    # first thread); the other threads saw only the trace before their region
    logprobs: list[float] = field(default_factory=list)
    trained: list[int] = field(default_factory=list)
    rows: list[SideRow] = field(default_factory=list)  # those other threads, as sequences


def _outlines(text: str) -> int:
    """Outlines in the region `text` ends in (it ends with "</Outlines>")."""
    region = text[text.rfind("<Parallel>") :]
    return len(re.findall(r"<(?:Subtask|Trial)>", region))


def generate_parallel(
    engine: Engine,
    prompts: Sequence[Sequence[int]],
    tokenizer,
    params: SamplingParams,
    seeds: Sequence[int] | None = None,
) -> list[ParallelEpisode]:
    """Generate each prompt's trace as Parason runs it: the main path until it closes a region's
    `</Outlines>`, then one sibling per outline, opened with "<Thread>k:" after that prefix and
    blind to the others, until its `</Thread>`; then the main path again after all threads.
    The whole response stays within params.max_new_tokens (threads share what is left equally;
    a region without room for its threads ends the reply, 'length'), so parallel and
    sequential traces run on the same budget. A region nested in a thread is written by that
    thread in one pass."""
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    main = SamplingParams(**{**params.__dict__, "stop": (*params.stop, "</Outlines>")})
    thread = SamplingParams(**{**params.__dict__, "stop": ("</Thread>",)})
    closing = encode("</Thread>")
    episodes = [ParallelEpisode([], "", "length", 0) for _ in prompts]
    active, round_ = list(range(len(prompts))), 0
    while active:
        budgets = [params.max_new_tokens - len(episodes[i].token_ids) for i in active]
        contexts = [list(prompts[i]) + episodes[i].token_ids for i in active]
        outs = _generate(engine, contexts, main, budgets,
                         seeds and [(seeds[i], round_, 0) for i in active])  # fmt: skip
        regions = []
        for i, out in zip(active, outs):
            episode = episodes[i]
            _append(episode, out, [], [], trained=True)
            text = tokenizer.decode(episode.token_ids, skip_special_tokens=True)
            count = _outlines(text) if out.finish_reason == "stop" else 0
            if text.rstrip().endswith("</Outlines>") and count:
                # every thread needs room for its opening, a token of work and its closing
                share = (params.max_new_tokens - len(episode.token_ids)) // count
                if share > len(encode(f"<Thread>{count}:")) + len(closing):
                    regions.append((i, count, share))
                    continue
                episode.finish_reason = "length"
            else:
                episode.finish_reason = out.finish_reason
        jobs = [(i, k, share) for i, count, share in regions for k in range(count)]
        heads = [encode(f"<Thread>{k + 1}:") for _, k, _ in jobs]
        contexts = [
            list(prompts[i]) + episodes[i].token_ids + head for (i, _, _), head in zip(jobs, heads)
        ]
        budgets = [share - len(head) - len(closing) for (_, _, share), head in zip(jobs, heads)]
        outs = _generate(engine, contexts, thread, budgets,
                         seeds and [(seeds[i], round_, k + 1) for i, k, _ in jobs])  # fmt: skip
        for (i, k, _), context, head, out in zip(jobs, contexts, heads, outs):
            episode = episodes[i]
            if k:  # its context is the trace before the region, which the episode has moved past
                episode.rows.append(SideRow(
                    context + out.token_ids, [0] * len(context) + [1] * len(out.token_ids),
                    [0.0] * len(context) + list(out.logprobs),
                ))  # fmt: skip
            closed = tokenizer.decode(out.token_ids).rstrip().endswith("</Thread>")
            _append(episode, out, head, [] if closed else closing, trained=k == 0)
            episode.threads += 1
        active, round_ = [i for i, _, _ in regions], round_ + 1
    for episode in episodes:
        episode.text = tokenizer.decode(episode.token_ids, skip_special_tokens=True)
    return episodes


def _append(
    episode: ParallelEpisode, out: Completion, head: list[int], tail: list[int], trained: bool
) -> None:
    """Add `head` (the dispatcher's), `out`'s tokens (trained where its context is the
    episode's) and `tail` (the dispatcher's) to the assembled response."""
    n = len(out.token_ids)
    episode.token_ids += head + out.token_ids + tail
    episode.logprobs += [0.0] * len(head) + list(out.logprobs) + [0.0] * len(tail)
    episode.trained += [0] * len(head) + [int(trained)] * n + [0] * len(tail)


class DispatchingEngine:
    """The policy's engine, with every call's parallel regions dispatched as blind sibling
    threads (`generate_parallel`). A completion trains on the tokens the assembled trace holds as
    generated (the main path and each region's first thread); every later thread comes with it
    as its own sequence (`Completion.side_rows`), so each token is trained on exactly the context
    it was sampled from."""

    def __init__(self, engine: Engine, tokenizer):
        self.engine, self.tokenizer = engine, tokenizer

    def load_weights(self, model) -> None:
        self.engine.load_weights(model)

    def release_memory(self) -> None:
        self.engine.release_memory()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        episodes = generate_parallel(self.engine, prompts, self.tokenizer, params, seeds)
        return [
            Completion(e.token_ids, e.logprobs, e.finish_reason, e.text, e.trained, e.rows)
            for e in episodes
        ]


def _generate(
    engine: Engine,
    contexts: list[list[int]],
    params: SamplingParams,
    budgets: list[int],
    seed_parts: list[tuple[int, int, int]] | None,
) -> list[Completion]:
    """One engine call for contexts whose budgets differ: run to the largest and cut each at its
    own, which samples the same tokens because a row's randomness is its seed's alone."""
    if not contexts:
        return []
    seeds = seed_parts and [sample_seed(*parts) for parts in seed_parts]
    longest = SamplingParams(**{**params.__dict__, "max_new_tokens": max(max(budgets), 1)})
    outs = engine.generate(contexts, longest, seeds)
    return [
        out if len(out.token_ids) <= budget else
        Completion(out.token_ids[:budget], out.logprobs[:budget], "length")
        for out, budget in zip(outs, [max(b, 0) for b in budgets])
    ]  # fmt: skip


def counter_for(tokenizer, text: str) -> Counter:
    """A Counter of `tokenizer`'s tokens in `text`: exact from the offset mapping of a fast
    tokenizer, else by encoding each span on its own."""
    if getattr(tokenizer, "is_fast", False):
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return token_counter(encoded["offset_mapping"])
    return lambda start, end: len(tokenizer(text[start:end], add_special_tokens=False)["input_ids"])
