"""The policy update: epochs x minibatches of optimizer steps, each accumulated over micro-batches."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch
from transformers import (
    PreTrainedModel,
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
)

from rlvr.algos.correction import mismatch_metrics
from rlvr.algos.kl import KLFn
from rlvr.algos.losses import AGGREGATIONS, LossInputs
from rlvr.config import AlgoConfig, Config
from rlvr.models.logprobs import Gather, LogNormaliser, autocast, token_logprobs
from rlvr.models.lora import trainable_state_dict
from rlvr.models.shared_prefix import Prompts, batch_prompts, worth_sharing
from rlvr.train.batching import by_length
from rlvr.train.data_parallel import SINGLE, DataParallel
from rlvr.types import Batch

if TYPE_CHECKING:
    from rlvr.train.hooks import PassObserver


def make_optimizer(cfg: Config, model) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        trainable_state_dict(model).values(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay
    )


def make_scheduler(cfg: Config, optimizer):
    total = cfg.train.steps * cfg.algo.ppo_epochs * cfg.algo.minibatches
    if cfg.train.lr_schedule == "cosine":
        return get_cosine_schedule_with_warmup(optimizer, cfg.train.warmup_steps, total)
    return get_constant_schedule_with_warmup(optimizer, cfg.train.warmup_steps)


def scale_lr(optimizer: torch.optim.Optimizer, scheduler, factor: float) -> None:
    """The learning rate times `factor` from now on, the schedule's base included (both are in
    their state dicts, so a checkpoint keeps the lowered rate)."""
    for group in optimizer.param_groups:
        group["lr"] *= factor
    scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]


@dataclass
class UpdateResult:
    metrics: dict[str, float]
    skipped: int  # optimizer steps skipped for a non-finite loss or gradient
    # rows the passes ran on (train.skip_zero_advantage leaves some out); None: every row
    trained: torch.Tensor | None = None


def trim(batch_rows: torch.Tensor, attention: torch.Tensor) -> int:
    """Width of a right-padded slice: its longest sequence."""
    return int(attention[batch_rows].sum(-1).max())


def micro_logprobs(
    model, batch: Batch, rows: torch.Tensor, temperature: float, prompts: Prompts | None, **stats
):
    width = trim(rows, batch.attention_mask)
    input_ids, attention = batch.input_ids[rows, :width], batch.attention_mask[rows, :width]
    if prompts is not None and worth_sharing(prompts, rows):
        stats["prompts"] = Prompts(prompts.unit[rows], prompts.length[rows])
    return token_logprobs(model, input_ids, attention, temperature, **stats)


@torch.no_grad()
def batch_logprobs(
    model: PreTrainedModel,
    batch: Batch,
    micro_batch_size: int,
    temperature: float,
    share_prompt: bool = True,
    sum_pi_squared: torch.Tensor | None = None,
    observers: Sequence[PassObserver] = (),
    normaliser: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logprobs [B, T-1] of the whole batch without grad (old policy or reference); a given
    `sum_pi_squared` [B, T-1] receives sum_v pi_v^2 of each position from the same forward, a
    given `normaliser` [B, T-1] each position's logsumexp, and `observers` (methods' probes of
    the pass) what each micro-batch's forward showed."""
    out = torch.zeros_like(batch.loss_mask)
    # an observer reads the prompt's hidden states too, so that pass runs each row whole, unshared
    prompts = batch_prompts(batch, share_prompt and not observers)
    units = None if prompts is None else prompts.unit
    everything = torch.arange(len(batch))
    for rows in by_length(everything, batch.attention_mask.sum(-1), units).split(micro_batch_size):
        width = trim(rows, batch.attention_mask) - 1
        squares = None
        if sum_pi_squared is not None:
            squares = torch.zeros(len(rows), width, device=model.device)
        lse = LogNormaliser() if normaliser is not None else None
        with ExitStack() as watched:
            for observer in observers:
                watched.enter_context(observer.capture())
            lp, entropy = micro_logprobs(
                model, batch, rows, temperature, prompts, sum_pi_squared=squares,
                with_entropy=bool(observers), normaliser=lse,
            )  # fmt: skip
        out[rows, :width] = lp.float().cpu()
        if lse is not None:
            normaliser[rows, :width] = lse.values.float().cpu()
        if squares is not None:
            sum_pi_squared[rows, :width] = squares.cpu()
        for observer in observers:
            attention = batch.attention_mask[rows, : width + 1]
            observer.add(rows, attention, batch.loss_mask[rows, :width], entropy)
    return out


class LossTerm(Protocol):
    """A method's term of the loss beside the policy's, read off the update's own forward: the
    logprobs of chosen tokens at every position, with their gradient (an expectation over a few tokens)."""

    def gather_ids(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        """[R, width, k] the token ids whose logprobs the term reads, for batch rows `rows`."""

    def __call__(
        self, logprobs: torch.Tensor, rows: torch.Tensor, width: int, inputs: LossInputs, aggregate
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The term's loss and metrics from `logprobs` [R, width, k] of those ids; `aggregate`
        reduces a [R, width] tensor over `inputs` as the policy loss does."""


@dataclass
class Imitation:
    """Rows to imitate beside the policy loss: `coef` times the mean NLL of their reply tokens
    (loss_mask), each optimizer step taking its share of them in a fixed order."""

    batch: Batch
    coef: float
    metric: str  # the name its NLL is logged under


@dataclass
class UpdateInputs:
    batch: Batch
    advantages: torch.Tensor  # [B, T-1]
    old_logprobs: torch.Tensor | None  # [B, T-1]; None = on-policy single pass, old = current
    ref_logprobs: torch.Tensor | None  # [B, T-1]; None = no KL term in the loss
    kl_coef: float = 0.0
    values: torch.Tensor | None = None  # [B, T-1] critic values the advantages were built on
    returns: torch.Tensor | None = None  # [B, T-1] the critic's targets
    imitation: Imitation | None = None  # rows a method has the policy imitate
    terms: list[LossTerm] = field(default_factory=list)  # methods' terms of the loss
    ref_normaliser: torch.Tensor | None = None  # [B, T-1] the reference's logsumexp


def micro_batch_loss(
    model,
    data: UpdateInputs,
    rows: torch.Tensor,
    num_seqs: int,
    num_tokens: float,
    cfg: Config,
    loss_fn,
    kl_fn: KLFn | None,
    record: torch.Tensor | None = None,
    prompts: Prompts | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one micro-batch, scaled so the micro-batches of a minibatch sum to its loss;
    `num_seqs` and `num_tokens` are the minibatch's (`normalisers`); `record` [B, T-1], where
    given, receives the rows' logprobs (before this step)."""
    algo, device = cfg.algo, model.device
    bonus = algo.entropy_coef > 0
    # the terms' ids' columns end at the rows' width: the batch's full width cut to theirs
    width = trim(rows, data.batch.attention_mask) - 1
    ids = [term.gather_ids(rows, width) for term in data.terms]
    gather = Gather(torch.cat(ids, -1)) if ids else None
    lse = LogNormaliser() if "normaliser" in getattr(loss_fn, "requires", ()) else None
    logprobs, entropy = micro_logprobs(
        model, data.batch, rows, cfg.rollout.temperature, prompts,
        with_entropy=True, entropy_grad=bonus, gather=gather, normaliser=lse,
    )  # fmt: skip
    if record is not None:
        record[rows, :width] = logprobs.detach().float().cpu()
    old = (
        logprobs.detach()
        if data.old_logprobs is None
        else data.old_logprobs[rows, :width].to(device)
    )
    inputs = LossInputs(
        logprobs=logprobs,
        old_logprobs=old,
        advantages=data.advantages[rows, :width].to(device),
        loss_mask=data.batch.loss_mask[rows, :width].to(device),
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        norm_constant=float(algo.loss_norm_tokens or cfg.rollout.max_new_tokens),
        behaviour_logprobs=data.batch.behaviour_logprobs[rows, :width].to(device),
        normaliser=None if lse is None else lse.values,
        ref_logprobs=_columns(data.ref_logprobs, rows, width, device),
        ref_normaliser=_columns(data.ref_normaliser, rows, width, device),
    )
    aggregate = AGGREGATIONS[algo.loss_agg]
    out = loss_fn(inputs, algo)
    loss, metrics = out.loss, dict(out.metrics)
    if kl_fn is not None and data.ref_logprobs is not None:
        kl = aggregate(kl_fn(logprobs, data.ref_logprobs[rows, :width].to(device), algo), inputs)
        loss = loss + data.kl_coef * kl
        metrics["kl"] = kl.item()
    if bonus:
        loss = loss - algo.entropy_coef * aggregate(entropy, inputs)
    if gather is not None:  # each term reads its own ids' share of the one gather
        shares = gather.logprobs.split([i.shape[-1] for i in ids], -1)
        for term, logprobs_k in zip(data.terms, shares):
            term_loss, term_metrics = term(logprobs_k, rows, width, inputs, aggregate)
            loss = loss + term_loss
            metrics.update(term_metrics)
    on = inputs.loss_mask.bool()
    metrics["entropy"] = float(torch.where(on, entropy.detach(), 0.0).sum() / max(num_tokens, 1.0))
    metrics["loss"] = loss.item()
    return loss, metrics


def _columns(
    x: torch.Tensor | None, rows: torch.Tensor, width: int, device: torch.device
) -> torch.Tensor | None:
    return None if x is None else x[rows, :width].to(device)


def imitation_loss(
    model, batch: Batch, rows: torch.Tensor, num_tokens: float, coef: float
) -> tuple[torch.Tensor, float]:
    """`coef` times the mean NLL of the rows' reply tokens (over the minibatch's `num_tokens`),
    at temperature 1, as supervised fine-tuning computes it."""
    logprobs, _ = micro_logprobs(model, batch, rows, 1.0, None)
    mask = batch.loss_mask[rows, : logprobs.shape[1]].to(logprobs.device)
    nll = -(logprobs * mask).sum() / max(num_tokens, 1.0)
    return coef * nll, nll.item()


def imitation_parts(data: UpdateInputs, minibatches: int) -> list[torch.Tensor]:
    """Each optimizer step's share of the imitation rows, in a fixed order (none without)."""
    if data.imitation is None:
        return [torch.arange(0)] * minibatches
    return list(torch.arange(len(data.imitation.batch)).tensor_split(minibatches))


def imitation_passes(
    data: UpdateInputs, part: torch.Tensor, cfg: Config, parallel: DataParallel
) -> list[tuple[torch.Tensor, bool]]:
    """(rows, counted) of this rank's micro-batches of the imitation rows `part`."""
    lengths = data.imitation.batch.attention_mask.sum(-1)
    return list(parallel.micro_batches(part, cfg.train.micro_batch_size, lengths))


def imitation_pass(
    model, data: UpdateInputs, rows: torch.Tensor, part: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """The imitation term's loss on micro-batch `rows` of the step's imitation rows `part`, and
    its NLL under the term's metric name."""
    imitated = data.imitation
    num_tokens = float(imitated.batch.loss_mask[part].sum())
    loss, nll = imitation_loss(model, imitated.batch, rows, num_tokens, imitated.coef)
    return loss, {imitated.metric: nll}


def minibatch_backward(
    net, model, data: UpdateInputs, trained, part, num_seqs, num_tokens, cfg: Config, loss_fn,
    kl_fn, trainer_logprobs, prompts, parallel: DataParallel,
) -> dict[str, float]:  # fmt: skip
    """Accumulate one minibatch's gradient: the policy's micro-batches of rows `trained`, then
    the imitation rows `part`; `net` is what the passes call (DDP's wrapper of `model` when
    replicated). Returns this rank's summed metrics of the counted passes."""
    step_metrics: dict[str, float] = defaultdict(float)
    lengths = data.batch.attention_mask.sum(-1)
    units = None if prompts is None else prompts.unit
    micro = cfg.train.micro_batch_size
    passes = [
        (rows, counted, False)
        for rows, counted in parallel.micro_batches(trained, micro, lengths, units)
    ]
    if len(part):
        step_metrics[data.imitation.metric] = 0.0  # logged even where a rank has none
        passes += [(r, c, True) for r, c in imitation_passes(data, part, cfg, parallel)]
    for rows, counted, imitating in parallel.accumulate(passes, (trained[:1], False, False)):
        with autocast(cfg.train.autocast, model.device):
            if imitating:
                loss, metrics = imitation_pass(net, data, rows, part)
            else:
                loss, metrics = micro_batch_loss(
                    net, data, rows, num_seqs, num_tokens, cfg, loss_fn, kl_fn,
                    trainer_logprobs if counted else None, prompts,
                )  # fmt: skip
        (loss if counted else 0.0 * loss).backward()
        for name, value in metrics.items() if counted else ():
            step_metrics[name] += value
    return step_metrics


def policy_update(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler,
    data: UpdateInputs,
    cfg: Config,
    loss_fn,
    kl_fn: KLFn | None,
    generator: torch.Generator,
    parallel: DataParallel = SINGLE,
) -> UpdateResult:
    """algo.ppo_epochs passes over the batch, each split into algo.minibatches optimizer steps;
    with `parallel`, this rank computes its share of each minibatch (every rank must call this
    with the same data and generator state)."""
    algo, batch = cfg.algo, data.batch
    sums: dict[str, float] = defaultdict(float)
    optimizer_steps = skipped = 0
    # A single pass sees every row once, before any step: its logprobs are the trainer's view of
    # the behaviour policy, free to compare with the engine's (the trainer compares them itself
    # when it computes old logprobs in a separate pass).
    single_pass = data.old_logprobs is None and algo.ppo_epochs == 1 and algo.minibatches == 1
    trainer_logprobs = torch.zeros_like(batch.loss_mask) if single_pass else None
    # FSDP2 frees the weights it gathered for the prompt's forward before backward reaches it;
    # a method's loss term reads every position's logits, which a shared prompt packs away
    share = cfg.train.share_prompt and not parallel.sharded and not data.terms
    prompts = batch_prompts(batch, share)
    imitate = imitation_parts(data, algo.minibatches)
    inert = zero_gradient_rows(data, cfg, loss_fn, kl_fn)
    ran = torch.zeros(len(batch), dtype=torch.bool)
    net = parallel.computing(model)  # what the passes call: under DDP, its wrapper
    model.train()
    for _ in range(algo.ppo_epochs):
        order = torch.randperm(len(batch), generator=generator)
        for minibatch, part in zip(order.chunk(algo.minibatches), imitate):
            optimizer.zero_grad(set_to_none=True)
            num_tokens, num_seqs = normalisers(batch.loss_mask[minibatch], algo)
            # the normalisers stay the whole minibatch's, so skipping leaves the gradient as is;
            # an all-inert minibatch keeps one row, whose zero gradient Adam still steps on
            trained = minibatch if inert is None else minibatch[~inert[minibatch]]
            trained = trained if len(trained) else minibatch[:1]
            ran[trained] = True
            step_metrics = minibatch_backward(
                net, model, data, trained, part, num_seqs, num_tokens, cfg, loss_fn, kl_fn,
                trainer_logprobs, prompts, parallel,
            )  # fmt: skip
            step_metrics = parallel.sum_metrics(step_metrics)
            if inert is not None:  # the entropy of the rows trained, not diluted by the skipped
                trained_tokens = float(batch.loss_mask[trained].sum())
                step_metrics["entropy"] *= num_tokens / max(trained_tokens, 1.0)
            grad_norm = optimizer_step(model, optimizer, scheduler, step_metrics, cfg)
            if grad_norm is None:
                skipped += 1
                continue
            optimizer_steps += 1
            step_metrics["grad_norm"] = grad_norm
            for name, value in step_metrics.items():
                sums[name] += value
    metrics = {name: value / max(optimizer_steps, 1) for name, value in sums.items()}
    recorded = batch.loss_mask
    if inert is not None:
        metrics["skipped_rows"] = float(inert.float().mean())
        recorded = recorded * ~inert[:, None]
    if trainer_logprobs is not None:
        parallel.sum_tensor(trainer_logprobs)  # each rank recorded its own rows
        metrics.update(mismatch_metrics(trainer_logprobs, batch.behaviour_logprobs, recorded))
    return UpdateResult(metrics, skipped, None if inert is None else torch.nonzero(ran)[:, 0])


def optimizer_step(model, optimizer, scheduler, metrics: dict[str, float], cfg: Config):
    """Clip the summed gradient and step; None, with no step, where the gradient or a metric is
    not finite (a NaN step would poison the weights for good); else the gradient's norm."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
    if hasattr(grad_norm, "full_tensor"):  # a sharded model's, over all ranks' shards
        grad_norm = grad_norm.full_tensor()
    if not (torch.isfinite(grad_norm) and all(map(_finite, metrics.values()))):
        optimizer.zero_grad(set_to_none=True)
        return None
    optimizer.step()
    scheduler.step()
    return float(grad_norm)


def zero_gradient_rows(data: UpdateInputs, cfg: Config, loss_fn, kl_fn) -> torch.Tensor | None:
    """[B] True where a row adds exactly nothing to the gradient, so the update may skip its
    passes: its advantages are all 0, the loss weights every token by its advantage
    (`loss_fn.advantage_weighted`), and no other term reads the row (a KL term in the loss, the
    entropy bonus, a method's). None where nothing is skipped (train.skip_zero_advantage)."""
    if not (cfg.train.skip_zero_advantage and getattr(loss_fn, "advantage_weighted", False)):
        return None
    kl_in_loss = kl_fn is not None and data.ref_logprobs is not None and data.kl_coef != 0
    if kl_in_loss or cfg.algo.entropy_coef > 0 or data.terms:
        return None
    return ~((data.advantages != 0) & data.batch.loss_mask.bool()).any(-1)


def normalisers(loss_mask: torch.Tensor, algo: AlgoConfig) -> tuple[float, int]:
    """A minibatch's policy tokens and the rows its seq-mean aggregations divide by: all of
    them, or (algo.seq_mean_count_empty=false) only those with a policy token. mask [B, T]."""
    rows = len(loss_mask) if algo.seq_mean_count_empty else int(loss_mask.bool().any(-1).sum())
    return float(loss_mask.sum()), rows


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")
