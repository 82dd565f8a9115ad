"""Tree rollouts: each problem's episodes grow as a tree of partial episodes sharing prefixes.

A group starts as `width` independent episodes from the problem's root state. Each later round
picks branch points on finished root-to-leaf paths and regenerates `width - 1` new
continuations from the shared prefix there, until the problem has its `budget` of leaves:

- multi-turn envs branch at turn boundaries (the state after turn k's observation, the env
  copied as it was then); the k-th branching level sits after turn k;
- single-turn envs branch inside the reply, at the sampled token with the highest branch score
  (surprisal -logprob by default, or any per-token `scorer` such as `entropy_scorer`): the
  continuation keeps the reply up to that token and resamples it and what follows.

Every new branch starts from outcomes already known: expansion goes level by level (`depth`
levels at most, the root being the first), and within a level prefers paths under a node whose
leaves have mixed outcomes, then failed paths, then the most uncertain branch point. The
outcomes and message histories of the paths already below a branch point are recorded in the
new branches' info["tree"]["seen"].

Tree vocabulary: a node is a state where paths split (the root is the prompt); a leaf is one
returned Trajectory; a segment is the span of tokens between a node and the next node (or the
end of the leaf) on a path. A node's value is the mean outcome (total reward) of the leaves
below it; a segment's credit is its node's value minus its parent's. Each leaf's
info["tree"]["segments"] lists its segments root first; `segment_tensors` turns those into the
per-token tensors the `tree` advantage estimator reads.

Seeds: root branch k of problem g samples turn t from sample_seed(*seed, g * group_size + k, t)
(exactly the EpisodeRunner's stream, so a tree with no forks equals its output), and the
branch forked from branch b at token index i as child c from sample_seed(*seed, g, *b, i, c,
t): a tree depends only on (seed, problem, node path), never on batching.
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from transformers import PreTrainedTokenizerBase

from rlvr.envs.base import Env
from rlvr.rollout.engine import Completion, Engine, SamplingParams, sample_seed
from rlvr.rollout.hf_engine import sampling_logprobs
from rlvr.rollout.runner import Episode, EpisodeRunner, safe_step
from rlvr.rollout.tokens import Conversation
from rlvr.types import Problem, Trajectory

# Per-token branch scores of replies: scorer(prompts, replies) -> one score per reply token;
# the branch point of a path is its highest-scoring token.
Scorer = Callable[[list[list[int]], list[list[int]]], list[list[float]]]

BRANCH_AT = ("auto", "turn", "token")


def fork_env(env: Env) -> Env:
    """An independent copy of a stateful env at a branch point: `env.fork()` when the env has
    one, else copy.deepcopy with the env's callable attributes (reward functions, verifiers,
    clients) shared rather than copied. An env holding uncopyable state (sockets, sandboxes)
    should define `fork`."""
    fork = getattr(env, "fork", None)
    if callable(fork):
        return fork()
    shared = {id(v): v for v in getattr(env, "__dict__", {}).values() if callable(v)}
    return copy.deepcopy(env, shared)


def fork_episode(episode: Episode) -> Episode:
    """An independent copy of an episode's state (env, conversation, rewards, info)."""
    c = copy.copy(episode.conversation)  # no __post_init__: token lists are copied as they are
    c.messages, c.token_ids, c.loss_mask = list(c.messages), list(c.token_ids), list(c.loss_mask)
    c.logprobs, c.turn_ends, c.replies = list(c.logprobs), list(c.turn_ends), list(c.replies)
    return replace(
        episode, env=fork_env(episode.env), conversation=c, rewards=list(episode.rewards),
        texts=list(episode.texts), info=copy.deepcopy(episode.info),
    )  # fmt: skip


def entropy_scorer(model, params: SamplingParams, micro_batch_size: int = 8) -> Scorer:
    """Branch scores = entropy of the sampling distribution (temperature, top-k, top-p applied)
    at each reply token, from one teacher-forced pass of the model over prompt + reply."""

    @torch.no_grad()
    def score(prompts: list[list[int]], replies: list[list[int]]) -> list[list[float]]:
        out: list[list[float]] = []
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(prompts), micro_batch_size):
                rows = list(zip(prompts, replies))[start : start + micro_batch_size]
                seqs = [p + r for p, r in rows]
                ids = torch.zeros((len(seqs), max(map(len, seqs))), dtype=torch.long)
                attention = torch.zeros_like(ids)
                for i, s in enumerate(seqs):  # right padding: positions need no care
                    ids[i, : len(s)], attention[i, : len(s)] = torch.tensor(s), 1
                logits = model(
                    input_ids=ids.to(model.device), attention_mask=attention.to(model.device)
                ).logits
                for i, (p, r) in enumerate(rows):
                    lp = sampling_logprobs(
                        logits[i, len(p) - 1 : len(p) + len(r) - 1],
                        params.temperature, params.top_k, params.top_p,
                    )  # fmt: skip
                    entropy = -(lp.exp() * lp.masked_fill(lp.isinf(), 0.0)).sum(-1)
                    out.append(entropy.cpu().tolist())
        finally:
            model.train(was_training)
        return out

    return score


@dataclass(eq=False)
class _Node:
    id: int
    level: int  # 0 at the root, parent's + 1 below
    cut: int  # token index where this node's state ends its prefix (leaves: unused)
    messages: int = 0  # messages in the conversation at the start of the cut's turn
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)
    path: _Path | None = None  # leaves only


@dataclass(eq=False)
class _Path:
    """One root-to-leaf episode being generated (then finished), with what forking it needs."""

    episode: Episode
    node: _Node  # its leaf
    branch: tuple[int, ...]  # node path from the root: (k,) then (cut, child) per fork
    seed_parts: tuple[int, ...]
    turn: int  # the next turn to generate; starts at the turn it forked in
    start_turn: int
    prefix: list[int] = field(default_factory=list)  # kept reply tokens of the start turn
    prefix_logprobs: list[float] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)  # token index of each turn's reply
    scores: list[list[float]] = field(default_factory=list)  # branch score per reply token
    snapshots: dict[int, Episode] = field(default_factory=dict)  # state at the start of turn j
    forkable: bool = True  # whether its edge may still be split (snapshots are kept)
    seen: list[dict] = field(default_factory=list)


@dataclass(eq=False)
class _Tree:
    group: int
    root: _Node
    state: Episode  # the root state: env reset, prompt encoded
    budget: int  # leaves wanted
    ids: int = 1  # next node id

    def node(self, level: int, cut: int, messages: int, parent: _Node | None) -> _Node:
        self.ids += 1
        return _Node(self.ids - 1, level, cut, messages, parent)


def _leaves(node: _Node) -> list[_Node]:
    if not node.children:
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


def _outcome(leaf: _Node) -> float | None:
    """A leaf's total reward; None when its reward failed for infrastructure reasons."""
    episode = leaf.path.episode
    if episode.info.get("status") == "infra_error":
        return None
    return float(sum(episode.rewards))


def _values(root: _Node) -> tuple[dict[int, float], dict[int, int]]:
    """Node id -> mean outcome of the leaves below (the parent's value when none has one, so
    its advantage is 0), and node id -> number of leaves below."""
    values: dict[int, float] = {}
    counts: dict[int, int] = {}

    def visit(node: _Node, inherited: float) -> None:
        leaves = _leaves(node)
        known = [o for leaf in leaves if (o := _outcome(leaf)) is not None]
        values[node.id] = sum(known) / len(known) if known else inherited
        counts[node.id] = len(leaves)
        for child in node.children:
            visit(child, values[node.id])

    visit(root, 0.0)
    return values, counts


def _nodes(node: _Node) -> list[_Node]:
    return [node] + [n for child in node.children for n in _nodes(child)]


class TreeRunner(EpisodeRunner):
    """Tree rollouts with the EpisodeRunner's contract: `collect` returns `group_size` leaf
    Trajectories per problem (at most `budget` when set), problem by problem, each built
    exactly as the EpisodeRunner builds an episode, with info["tree"] describing its segments.

    width: children per branch point (the root has `width` episodes); depth: most branch
    points on a root-to-leaf path, root included, so a full tree has width ** depth leaves
    (more are sampled as extra root episodes, counted in stats["fallback_leaves"]).
    branch_at: "turn" (turn boundaries), "token" (inside replies) or "auto" ("turn" when
    max_turns > 1). scorer: per-token branch scores for "token" (None: -logprob of the
    sampled token, i.e. branch at the least likely choice). min_segment_tokens: a token branch
    point leaves at least this many tokens on both sides of it within the path it splits (so
    it never just resamples the last token), times the levels still to branch below it.

    After each collect, `timings` holds seconds (generate, env, score) and `stats` the cost:
    tokens_generated (sampled tokens kept), tokens_discarded (sampled past a row's budget in a
    shared engine call), independent_tokens (what the same leaves cost sampled independently),
    useful_samples (leaves of groups whose outcomes are not all equal), tokens_per_useful_sample.
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
        width: int = 2,
        depth: int = 2,
        budget: int | None = None,
        branch_at: str = "auto",
        scorer: Scorer | None = None,
        min_segment_tokens: int = 4,
    ):
        super().__init__(
            engine, tokenizer, make_env, params, max_turns=max_turns, chunk_size=chunk_size,
            workers=workers, max_total_tokens=max_total_tokens,
        )  # fmt: skip
        if width < 2 or depth < 1 or (budget is not None and budget < 1):
            raise ValueError(
                f"TreeRunner needs width >= 2, depth >= 1 and budget >= 1 (or None); got "
                f"width={width}, depth={depth}, budget={budget}."
            )
        if branch_at not in BRANCH_AT:
            raise ValueError(f"branch_at must be one of {BRANCH_AT}; got {branch_at!r}.")
        self.width, self.depth, self.budget, self.scorer = width, depth, budget, scorer
        self.min_segment = max(1, min_segment_tokens)
        self.mode = branch_at if branch_at != "auto" else ("turn" if max_turns > 1 else "token")
        self.stats: dict[str, float] = {}

    # ---------------------------------------------------------------- the tree, round by round

    def collect(
        self,
        problems: Sequence[Problem],
        group_size: int,
        seed: Sequence[int],
        params: SamplingParams | None = None,
        first_group: int = 0,
    ) -> list[Trajectory]:
        params = params or self.params
        self.timings = {"generate": 0.0, "env": 0.0, "score": 0.0}
        self.stats = {"tokens_generated": 0, "tokens_discarded": 0, "fallback_leaves": 0}
        leaves = min(self.budget or group_size, group_size)
        trees, paths = [], []
        for group, problem in enumerate(problems, start=first_group):
            env = self.make_env()
            tools = getattr(env, "tool_schemas", None)
            state = Episode(
                problem, group, group * group_size, env,
                Conversation(self.tokenizer, env.reset(problem), tools=tools),
            )  # fmt: skip
            root = _Node(0, 0, len(state.conversation.token_ids), len(state.conversation.messages))
            trees.append(tree := _Tree(group, root, state, leaves))
            paths += [self._root_branch(tree, group_size) for _ in range(min(self.width, leaves))]
        self._advance(paths, seed, params)
        while new := [path for tree in trees for path in self._expand(tree)]:
            self._advance(new, seed, params)
        extra = [  # a tree that cannot branch enough (short episodes, small width ** depth)
            self._root_branch(tree, group_size, forkable=False)
            for tree in trees
            for _ in range(tree.budget - len(_leaves(tree.root)))
        ]
        self.stats["fallback_leaves"] = len(extra)
        self._advance(extra, seed, params)
        return self._trajectories(trees, first_group * group_size)

    def _root_branch(self, tree: _Tree, group_size: int, forkable: bool = True) -> _Path:
        k = len(tree.root.children)
        leaf = tree.node(1, 0, 0, tree.root)
        tree.root.children.append(leaf)
        seed_parts = (tree.group * group_size + k,)  # the EpisodeRunner's sample index
        leaf.path = _Path(
            fork_episode(tree.state), leaf, (k,), seed_parts, 0, 0,
            snapshots={0: tree.state}, forkable=forkable and self.depth > 1,
        )  # fmt: skip
        return leaf.path

    def _expand(self, tree: _Tree) -> list[_Path]:
        """New branches for the next round: split the best paths at the shallowest level that
        can still branch, width - 1 new continuations each, within the tree's budget."""
        leaves = _leaves(tree.root)
        remaining = tree.budget - len(leaves)
        if remaining <= 0:
            return []
        known = [o for leaf in leaves if (o := _outcome(leaf)) is not None]
        mean = sum(known) / len(known) if known else 0.0
        candidates = []
        for order, leaf in enumerate(leaves):
            parent = leaf.parent
            if parent.level + 1 >= self.depth or not leaf.path.forkable:
                continue
            cut = self._branch_point(leaf.path, parent)
            if cut is None:
                continue
            below = [_outcome(n) for n in _leaves(parent)]
            settled = None not in below and len(set(below)) == 1  # no mixed or missing outcomes
            outcome = _outcome(leaf)
            succeeded = outcome is not None and outcome >= mean
            key = (parent.level, settled, succeeded, -cut[3], order)
            candidates.append((key, leaf, cut))
        if not candidates:
            return []
        level = min(key[0] for key, _, _ in candidates)
        new = []
        for _, leaf, cut in sorted((c for c in candidates if c[0][0] == level), key=lambda c: c[0]):
            if remaining <= 0:
                break
            n = min(self.width - 1, remaining)
            new += self._split(tree, leaf, cut, n)
            remaining -= n
        return new

    def _branch_point(self, path: _Path, parent: _Node) -> tuple[int, int, int, float] | None:
        """(turn, offset in its reply, token index, score) of the best place to branch the
        path below `parent`, or None. A token branch point leaves min_segment tokens above it
        and min_segment for each level that may still branch below it, leaf included."""
        best, after = None, parent.cut
        levels_below = self.depth - parent.level - 1
        end = len(path.episode.conversation.token_ids) - self.min_segment * levels_below
        for turn in range(len(path.episode.conversation.replies)):
            start = path.turn_starts[turn]
            if turn not in path.snapshots:
                continue
            if self.mode == "turn":
                if start > after:
                    return turn, 0, start, 0.0  # the first turn boundary below the node
                continue
            for offset, score in enumerate(path.scores[turn]):
                index = start + offset
                if after + self.min_segment <= index <= end and (best is None or score > best[3]):
                    best = (turn, offset, index, score)
        return best

    def _split(
        self, tree: _Tree, leaf: _Node, cut: tuple[int, int, int, float], n: int
    ) -> list[_Path]:
        """Insert a node on the edge above `leaf` at `cut`; `n` new branches from it."""
        turn, offset, index, _ = cut
        parent, source = leaf.parent, leaf.path
        snapshot = source.snapshots[turn]
        node = tree.node(parent.level + 1, index, len(snapshot.conversation.messages), parent)
        parent.children[parent.children.index(leaf)] = node
        node.children, leaf.parent, leaf.level = [leaf], node, node.level + 1
        seen = [self._summary(other, parent) for other in _leaves(parent)]
        conversation = source.episode.conversation
        new = []
        for child in range(1, n + 1):
            branch = (*source.branch, index, child)
            new_leaf = tree.node(node.level + 1, 0, 0, node)
            node.children.append(new_leaf)
            new_leaf.path = _Path(
                fork_episode(snapshot), new_leaf, branch, (tree.group, *branch), turn, turn,
                prefix=conversation.token_ids[index - offset : index],
                prefix_logprobs=conversation.logprobs[index - offset : index],
                turn_starts=source.turn_starts[:turn], scores=source.scores[:turn],
                snapshots={turn: snapshot}, forkable=node.level + 1 < self.depth, seen=list(seen),
            )  # fmt: skip
            new.append(new_leaf.path)
        return new

    @staticmethod
    def _summary(leaf: _Node, below: _Node) -> dict:
        """What a later expansion knows of a finished path: its outcome and the messages
        (replies and observations) after the node `below` it branched from."""
        episode = leaf.path.episode
        return {
            "leaf": leaf.id,
            "outcome": _outcome(leaf),
            "status": episode.info.get("status", "ok"),
            "correct": bool(episode.info.get("correct", False)),
            "history": copy.deepcopy(episode.conversation.messages[below.messages :]),
            "response_text": "".join(episode.texts),
        }

    # ---------------------------------------------------------------- generating paths

    def _advance(self, paths: list[_Path], seed: Sequence[int], params: SamplingParams) -> None:
        """Run every path to its end, turn by turn in lock-step batches like the EpisodeRunner
        (paths may be at different turns; a forked path's first turn continues its prefix)."""
        active = [p for p in paths if not p.episode.done]
        while active:
            steps = []
            size = self.chunk_size or len(active)
            for chunk in (active[i : i + size] for i in range(0, len(active), size)):
                for p in chunk:
                    if p.forkable and p.turn not in p.snapshots and self._may_branch_in(p):
                        p.snapshots[p.turn] = fork_episode(p.episode)
                    p.turn_starts.append(len(p.episode.conversation.token_ids))
                budgets = [params.max_new_tokens - len(p.prefix) for p in chunk]
                prompts = [p.episode.conversation.token_ids + p.prefix for p in chunk]
                seeds = [sample_seed(*seed, *p.seed_parts, p.turn) for p in chunk]
                start = time.perf_counter()
                # One call for the chunk: a row with a shorter budget keeps its first tokens,
                # which are what an engine call with its own budget samples (seeded per row).
                call = replace(params, max_new_tokens=max(budgets))
                completions = self.engine.generate(prompts, call, seeds)
                self.timings["generate"] += time.perf_counter() - start
                for p, completion, budget in zip(chunk, completions, budgets):
                    completion = self._within_budget(p.episode, self._join(p, completion, budget))
                    step = self.pool.submit(safe_step, p.episode.env, completion.text)
                    steps.append((p, completion, step))
            scores = self._scores(steps)
            start = time.perf_counter()
            for (p, completion, step), score in zip(steps, scores):
                p.scores.append(score)
                self._record(p.episode, completion, step.result(), p.turn)
                p.prefix, p.prefix_logprobs, p.turn = [], [], p.turn + 1
            self.timings["env"] += time.perf_counter() - start
            active = [p for p in active if not p.episode.done]

    def _may_branch_in(self, path: _Path) -> bool:
        """Whether a later cut may fall in the path's current turn (needing a snapshot): any turn
        for token branching, the first depth - 1 turns after its start for turn boundaries."""
        return self.mode == "token" or path.turn - path.start_turn < self.depth

    def _join(self, path: _Path, completion: Completion, budget: int) -> Completion:
        """The whole reply: the forked prefix, then the completion cut to the row's budget."""
        ids, logprobs, reason = completion.token_ids, completion.logprobs, completion.finish_reason
        if len(ids) > budget:
            self.stats["tokens_discarded"] += len(ids) - budget
            ids, logprobs, reason = ids[:budget], logprobs[:budget], "length"
        self.stats["tokens_generated"] += len(ids)
        if not path.prefix and len(ids) == len(completion.token_ids):
            return completion
        ids = path.prefix + ids
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(ids, path.prefix_logprobs + logprobs, reason, text)

    def _scores(self, steps: list) -> list[list[float]]:
        if self.mode == "turn":
            return [[] for _ in steps]
        if self.scorer is None:
            return [[-lp for lp in completion.logprobs] for _, completion, _ in steps]
        start = time.perf_counter()
        prompts = [p.episode.conversation.token_ids for p, _, _ in steps]
        scores = self.scorer(prompts, [completion.token_ids for _, completion, _ in steps])
        self.timings["score"] += time.perf_counter() - start
        return scores

    # ---------------------------------------------------------------- leaves out

    def _trajectories(self, trees: list[_Tree], first_sample: int) -> list[Trajectory]:
        out: list[Trajectory] = []
        useful = independent = branch_points = 0
        for tree in trees:
            values, counts = _values(tree.root)
            leaves = _leaves(tree.root)
            known = [o for leaf in leaves if (o := _outcome(leaf)) is not None]
            useful += len(leaves) if len(set(known)) > 1 else 0
            branch_points += sum(len(n.children) > 1 for n in _nodes(tree.root))
            for leaf in leaves:
                episode = leaf.path.episode
                episode.sample_index = first_sample + len(out)
                chain = []
                node = leaf
                while node.parent is not None:
                    chain.append(node)
                    node = node.parent
                end = len(episode.conversation.token_ids)
                segments = [
                    {
                        "node": n.id,
                        "parent": n.parent.id,
                        "level": n.level,
                        "start": n.parent.cut,
                        "end": end if n is leaf else n.cut,
                        "value": values[n.id],
                        "parent_value": values[n.parent.id],
                        "leaves": counts[n.id],
                    }
                    for n in reversed(chain)
                ]
                episode.info["tree"] = {
                    "leaf": leaf.id,
                    "root": tree.root.id,
                    "branch": list(leaf.path.branch),
                    "outcome": _outcome(leaf),
                    "segments": segments,
                    "seen": leaf.path.seen,
                }
                trajectory = episode.to_trajectory()
                independent += trajectory.num_generated
                out.append(trajectory)
                leaf.path.snapshots = {}
        generated = self.stats["tokens_generated"]
        self.stats.update(
            leaves=len(out),
            branch_points=branch_points,
            independent_tokens=independent,
            useful_samples=useful,
            # every token when no sample was useful: the cost of at most one
            tokens_per_useful_sample=generated / max(useful, 1),
        )
        return out


def segment_tensors(
    trajectories: Sequence[Trajectory],
    width: int,
    rewards: Sequence[float] | torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token tree credit for AdvInputs, aligned like Batch.loss_mask (column t describes
    token t + 1): segment_advantages [B, width] = value of the token's segment's node minus its
    parent's, and segment_weights [B, width] = 1 / number of rows sharing that segment.

    Values are recomputed over the rows given, from `rewards` (default: each trajectory's
    reward now, e.g. after overlong penalties), so dropped rows and reward shaping applied
    after collect are accounted for. Rows sharing a (group_id, node id) share a segment.
    """
    if rewards is None:
        rewards = [t.reward for t in trajectories]
    rewards = [float(r) for r in rewards]
    rows: dict[tuple[int, int], list[int]] = defaultdict(list)
    for row, t in enumerate(trajectories):
        tree = t.info.get("tree")
        if tree is None:
            raise ValueError(
                f"trajectory {row} has no info['tree']: the 'tree' advantage needs trajectories "
                "from rlvr.rollout.tree.TreeRunner. Fix: sample with TreeRunner."
            )
        rows[(t.group_id, tree["root"])].append(row)
        for segment in tree["segments"]:
            rows[(t.group_id, segment["node"])].append(row)
    value = {key: sum(rewards[r] for r in members) / len(members) for key, members in rows.items()}
    advantages = torch.zeros((len(trajectories), width + 1))  # indexed by token, then shifted
    weights = torch.zeros((len(trajectories), width + 1))
    for row, t in enumerate(trajectories):
        mask = torch.tensor(t.loss_mask[: width + 1], dtype=torch.float)
        for segment in t.info["tree"]["segments"]:
            node, parent = (t.group_id, segment["node"]), (t.group_id, segment["parent"])
            span = slice(segment["start"], min(segment["end"], width + 1))
            advantages[row, span] = (value[node] - value[parent]) * mask[span]
            weights[row, span] = mask[span] / len(rows[node])
    return advantages[:, 1:], weights[:, 1:]
