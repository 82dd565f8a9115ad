"""Warm start of the embedded tiny model: supervised training on a task's demonstrations, cached.

A configurable share of the demonstrations makes the task's systematic mistake, so the base
model is imperfect and RL has something to fix.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import torch
from filelock import FileLock
from transformers import get_cosine_schedule_with_warmup

from rlvr.config import Config
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.registry import lookup
from rlvr.rewards.peer import answer_reader
from rlvr.rollout.critique import critic_problem, shown_text
from rlvr.rollout.parallel import blind_threads
from rlvr.rollout.tokens import Conversation
from rlvr.tasks import TASKS
from rlvr.tasks.base import Task
from rlvr.tasks.hints import hinted, rationale_segments

COMPLETE = "COMPLETE"
WARM_START_LOG = "warm_start.json"  # what supervised_train returned, beside the weights
DEFAULT_BATCH_SIZE = 64  # demonstrations a step, for a task that names no batch of its own
CRITIQUE_SHARE = 0.5  # under a debate, demonstrations shown in the critic's layout
SFT_PIECES = 4  # length-sorted micro-batches of a warm-start step whose lengths vary widely
HOLDOUT_EVERY = 25  # warm-start steps between two measurements of the held-out rows' loss
HOLDOUT_PATIENCE = 4  # measurements without a new best before the warm start stops
HOLDOUT_CAP = 256  # held-out rows at most: a large file's share would make each measurement slow


def pretrain_batch_size(cfg: Config, task: Task) -> int:
    """The warm-start batch: the config's, else the task's own, else DEFAULT_BATCH_SIZE."""
    return cfg.model.pretrain_batch_size or getattr(task, "pretrain_batch_size", DEFAULT_BATCH_SIZE)


def rlvr_home() -> Path:
    return Path(os.environ.get("RLVR_HOME", Path.home() / ".cache" / "rlvr"))


def warm_start_key(cfg: Config, task: Task) -> str:
    """Settings, and the data `task` (built from `cfg`) reads, that the warm start depends on."""
    m = cfg.model
    task_cls = lookup(TASKS, cfg.task.name, "task.name", group="rlvr.tasks")
    settings = {
        "format": 3,  # bump when the tokenizer, template or SFT recipe changes
        "preset": m.preset,
        "task": cfg.task.name,
        # resolved, defaults included: a changed default must not reuse a stale warm start
        "params": task_cls.Params.model_validate(cfg.task.params).model_dump(mode="json"),
        "steps": m.pretrain_steps,
        "batch": pretrain_batch_size(cfg, task),
        "lr": m.pretrain_lr,
        "flawed": m.pretrain_flawed_share,
        "seed": cfg.train.seed,
    }
    if m.layers is not None:  # only when set, so every other warm start keeps its key
        settings["layers"] = m.layers
    if m.pretrain_hint_share:  # only when set, so every other warm start keeps its key
        settings["hints"] = [m.pretrain_hint_share, m.pretrain_hint_segments]
    if cfg.debate.rounds:
        settings["debate"] = [cfg.debate.shown, cfg.debate.show, CRITIQUE_SHARE]
    # What the demonstrations look like: a new release that changes how a task writes them (its
    # reply format, its flaw) must not reuse a model warm-started on the old ones.
    shown = [task.train_problem(i) for i in range(2)]
    settings["demonstrations"] = hashlib.sha256(
        repr(
            [(p.prompt, task.demonstration(p), task.demonstration(p, True)) for p in shown]
        ).encode()
    ).hexdigest()[:12]
    if hasattr(task, "fingerprint"):
        # A path is not its contents: a rewritten file must not reuse the old rows' warm start.
        settings["data"] = task.fingerprint()
    if held_out_rows(cfg, task):
        settings["holdout"] = [m.pretrain_holdout, HOLDOUT_EVERY, HOLDOUT_PATIENCE, HOLDOUT_CAP]
    if hasattr(task, "fit_prompts") and cfg.task.long_prompts != "error":
        # Skipped or truncated rows depend on the room a prompt has.
        settings["fit"] = [cfg.task.long_prompts, cfg.rollout.max_new_tokens]
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return f"{cfg.task.name.replace(':', '_')}-{m.preset}-{digest}"


def warm_start_path(cfg: Config, task: Task) -> Path:
    return rlvr_home() / "tiny" / warm_start_key(cfg, task)


def sft_example(
    tokenizer,
    task: Task,
    index: int,
    flawed: bool,
    hint: tuple[int, int] | None = None,
    critique: list[str] | None = None,
) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of one demonstration, built with the rollout's token layer so
    warm start and RL see the same layout: the assistant's replies (EOS included) are trained,
    the prompt and anything between replies are not. A demonstration is one reply, or the
    messages of a whole multi-turn episode after the prompt. `hint` = (level, segments): the
    prompt carries RGPO's hint of the reply's first `level` of `segments` pieces; `critique`, a
    debate's earlier answers, shows it in the critic's layout."""
    return sft_examples(tokenizer, task, index, flawed, hint, critique)[0]


def sft_examples(
    tokenizer,
    task: Task,
    index: int,
    flawed: bool,
    hint: tuple[int, int] | None = None,
    critique: list[str] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """The demonstration's example (see sft_example) and, for a parallel-thread trace, one per
    blind sibling thread: the prompt and the reply up to the region's threads, untrained, then
    that thread alone, trained, so a dispatched thread sees what it was taught on."""
    problem = task.train_problem(index)
    demo = task.demonstration(problem, flawed=flawed)
    if hint is not None:
        level, segments = hint
        problem = hinted(problem, "".join(rationale_segments(demo, segments)[:level]))
    if critique is not None:
        problem = critic_problem(problem, [critique])
    messages = [{"role": "assistant", "content": demo}] if isinstance(demo, str) else demo
    # The prompt the env opens the episode with, and its tools (rendered by the token layer).
    env = task.make_env(None, None) if hasattr(task, "make_env") else None
    prompt = env.reset(problem) if env is not None else None
    tools = getattr(env, "tool_schemas", None)
    conversation = Conversation(tokenizer, prompt or problem.messages(), tools=tools)
    pending: list = []  # observation messages since the last reply
    for message in messages:
        if message["role"] != "assistant":
            pending.append(message)
            continue
        if pending:
            conversation.add_observation(pending)
            pending = []
        ids = tokenizer(message["content"], add_special_tokens=False)["input_ids"]
        conversation.add_reply(ids + [tokenizer.eos_token_id])
    examples = [(conversation.token_ids, conversation.loss_mask)]
    if isinstance(demo, str):
        encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        for context, thread in blind_threads(demo):
            view = Conversation(tokenizer, prompt or problem.messages(), tools=tools)
            thread_ids = encode(thread)
            view.add_reply(encode(context) + thread_ids)
            untrained = len(view.token_ids) - len(thread_ids)
            examples.append((view.token_ids, [0] * untrained + [1] * len(thread_ids)))
    return examples


def draw_hint(rng: random.Random, share: float, segments: int) -> tuple[int, int] | None:
    """A warm-start example's hint (level, segments) with probability `share`, else None; no draw
    at share 0, so the demonstrations of a run without hints are unchanged."""
    if share and rng.random() < share:
        return rng.randint(1, segments), segments
    return None


def draw_critique(rng: random.Random, task: Task, index: int, cfg: Config) -> list[str] | None:
    """Under a debate, with probability CRITIQUE_SHARE: the earlier answers a critic-layout
    demonstration of problem `index` shows, each the task's demonstration, flawed at the warm
    start's share, as the generator would answer; no draw without a debate."""
    d = cfg.debate
    if not d.rounds or rng.random() >= CRITIQUE_SHARE:
        return None
    problem = task.train_problem(index)
    answer = answer_reader(task.verifier, cfg.task.reward_params)
    replies = [
        task.demonstration(problem, flawed=rng.random() < cfg.model.pretrain_flawed_share)
        for _ in range(d.shown)
    ]
    return [shown_text(reply, d.show, answer) for reply in replies]


def padded(examples: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """input_ids, attention_mask and labels [N, longest] of (ids, trained mask) examples, right-
    padded; labels are -100 off the trained tokens."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id)
    labels = torch.full((len(examples), width), -100)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, mask) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, : len(ids)] = torch.tensor([t if keep else -100 for t, keep in zip(ids, mask)])
    return input_ids, attention, labels


def sft_backward(model, examples: list[tuple[list[int], list[int]]], pad_id: int) -> float:
    """Backpropagate the mean next-token loss over every trained token of `examples`; returns it.
    When padding would be over a quarter of the batch (multi-turn episodes of mixed lengths),
    the examples run as SFT_PIECES length-sorted micro-batches, each weighted by its share of the
    trained tokens: the same loss and gradient, without computing most of the padding."""
    lengths = [len(ids) for ids, _ in examples]
    if len(examples) * max(lengths) <= 4 / 3 * sum(lengths):
        pieces = [examples]
    else:
        ordered = sorted(examples, key=lambda example: len(example[0]))
        size = -(-len(ordered) // SFT_PIECES)
        pieces = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    batches = [padded(piece, pad_id) for piece in pieces]
    counts = [int((labels[:, 1:] != -100).sum()) for _, _, labels in batches]
    total, value = max(sum(counts), 1), 0.0
    for (input_ids, attention, labels), count in zip(batches, counts):
        if not count and len(batches) > 1:  # nothing trained in this piece: its mean is NaN
            continue
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        (loss * (count / total)).backward()
        value += loss.item() * count / total
    return value


def held_out_rows(cfg: Config, task: Task) -> int:
    """How many of a finite task's training rows (a file's: `task.train_size`) the warm start
    holds out to stop itself on (model.pretrain_holdout, at most HOLDOUT_CAP); 0 for a generated
    task, or when too few rows are left to train on."""
    rows = getattr(task, "train_size", 0)
    held = min(round(cfg.model.pretrain_holdout * rows), HOLDOUT_CAP)
    return held if 0 < held <= rows - 2 else 0


def held_out_loss(model, tokenizer, task: Task, rows: int) -> float:
    """Mean next-token loss over the trained tokens of the correct demonstrations of the first
    `rows` training problems (one epoch's first rows: distinct problems)."""
    examples = [e for index in range(rows) for e in sft_examples(tokenizer, task, index, False)]
    total, tokens = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(examples), DEFAULT_BATCH_SIZE):
            input_ids, attention, labels = padded(
                examples[start : start + DEFAULT_BATCH_SIZE], tokenizer.pad_token_id
            )
            count = int((labels[:, 1:] != -100).sum())
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            total, tokens = total + float(loss) * count, tokens + count
    model.train()
    return total / max(tokens, 1)


def supervised_train(model, tokenizer, task: Task, cfg: Config, on_step=None) -> dict:
    """Next-token loss on demonstrations. A finite task's warm start trains on all but its
    held-out rows, measures their loss every HOLDOUT_EVERY steps, and stops after
    HOLDOUT_PATIENCE measurements without a new best, keeping the best weights. Returns what
    happened: the final smoothed loss, the steps run, and the held-out losses by step."""
    m = cfg.model
    rng = random.Random(f"warmstart:{cfg.train.seed}")
    held = held_out_rows(cfg, task)
    best, best_state, stale, curve = float("inf"), None, 0, []
    optimizer = torch.optim.AdamW(model.parameters(), lr=m.pretrain_lr, weight_decay=0.01)
    scheduler = get_cosine_schedule_with_warmup(
        optimizer, min(100, m.pretrain_steps // 10), m.pretrain_steps
    )
    model.train()
    smoothed = None
    for step in range(m.pretrain_steps):
        examples = []
        for _ in range(pretrain_batch_size(cfg, task)):
            index = rng.randrange(held, task.train_size) if held else rng.randrange(10**9)
            flawed = rng.random() < m.pretrain_flawed_share
            hint = draw_hint(rng, m.pretrain_hint_share, m.pretrain_hint_segments)
            critique = draw_critique(rng, task, index, cfg)
            examples += sft_examples(tokenizer, task, index, flawed, hint, critique)
        optimizer.zero_grad(set_to_none=True)
        value = sft_backward(model, examples, tokenizer.pad_token_id)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        smoothed = value if smoothed is None else 0.95 * smoothed + 0.05 * value
        if on_step:
            on_step(step + 1, smoothed)
        if held and (step + 1) % HOLDOUT_EVERY == 0:
            curve.append((step + 1, held_out_loss(model, tokenizer, task, held)))
            if curve[-1][1] < best:
                best, best_state, stale = curve[-1][1], copy.deepcopy(model.state_dict()), 0
            else:
                stale += 1
                if stale == HOLDOUT_PATIENCE:
                    break
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"loss": float(smoothed), "steps": step + 1, "held_out_rows": held,
            "held_out_loss": curve}  # fmt: skip


def ensure_warm_start(cfg: Config, task: Task, on_step=None) -> Path:
    """The cached warm-started tiny model for these settings and data, built on first use. Runs
    that start together share one build: the others wait on its lock, then load it."""
    path = warm_start_path(cfg, task)
    if (path / COMPLETE).is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_name(f".{path.name}.lock")):
        if (path / COMPLETE).is_file():  # built by the run that held the lock
            return path
        return build_warm_start(cfg, task, path, on_step)


def build_warm_start(cfg: Config, task: Task, path: Path, on_step=None) -> Path:
    tokenizer = build_tokenizer(getattr(task, "added_tokens", ()))
    model = build_model(cfg.model.preset, tokenizer, seed=cfg.train.seed, layers=cfg.model.layers)
    # model.pretrain_steps = 0: the model as initialised, for RL from scratch
    trained = (
        supervised_train(model, tokenizer, task, cfg, on_step)
        if cfg.model.pretrain_steps
        else {"steps": 0}
    )
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / WARM_START_LOG).write_text(json.dumps(trained))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    (path / COMPLETE).write_text("ok")
    return path


def held_out_summary(path: Path) -> str | None:
    """One line on how a warm start that held rows out ended, from its log; None without one."""
    log = path / WARM_START_LOG
    trained = json.loads(log.read_text()) if log.is_file() else {}
    if not trained.get("held_out_loss"):
        return None
    best_step, best = min(trained["held_out_loss"], key=lambda point: point[1])
    return (
        f"warm start: {trained['held_out_rows']} training rows held out; their loss was lowest "
        f"({best:.3f}) at step {best_step}, and the warm start kept those weights (it ran "
        f"{trained['steps']} steps)"
    )
