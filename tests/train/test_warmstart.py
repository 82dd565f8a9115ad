import json
import random
import threading
import time

import pytest
import torch

from rlvr.config import load_config
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.train import warmstart
from rlvr.train.components import build_task
from rlvr.train.warmstart import (
    draw_critique,
    draw_hint,
    ensure_warm_start,
    padded,
    sft_backward,
    sft_example,
    sft_examples,
    supervised_train,
    warm_start_key,
    warm_start_path,
)


def test_demonstration_example_trains_only_the_reply(tokenizer):
    task = build_task(load_config())
    ids, mask = sft_example(tokenizer, task, 0, flawed=False)
    reply = task.demonstration(task.train_problem(0))
    assert sum(mask) == len(reply) + 1  # one token per character, plus EOS
    assert ids[-1] == tokenizer.eos_token_id and mask[: mask.index(1)] == [0] * mask.index(1)
    assert tokenizer.decode(ids[mask.index(1) : -1]) == reply


def test_a_hinted_example_shows_the_first_segments_of_its_own_reply(tokenizer):
    task = build_task(load_config(None, ["task.name=target_string", "task.target=hello"]))
    for flawed in (False, True):
        reply = task.demonstration(task.train_problem(4), flawed=flawed)
        ids, mask = sft_example(tokenizer, task, 4, flawed=flawed, hint=(1, 2))
        plain_ids, plain_mask = sft_example(tokenizer, task, 4, flawed=flawed)
        prompt = tokenizer.decode(ids[: mask.index(1)])
        # 5 characters in 2 segments: "hel" + "lo"; the trained reply is the same either way.
        assert prompt.endswith(f"\n\nHint: {reply[:3]}<|end|><|assistant|>")
        assert ids[mask.index(1) :] == plain_ids[plain_mask.index(1) :]
    ids, mask = sft_example(tokenizer, task, 4, flawed=False, hint=(2, 2))
    assert tokenizer.decode(ids[: mask.index(1)]).endswith("Hint: hello<|end|><|assistant|>")


def test_a_parallel_demonstration_also_trains_each_later_thread_blind_to_its_siblings():
    task = build_task(load_config(None, ["task.name=product_sum", "task.parallel_share=1"]))
    tokenizer = build_tokenizer(task.added_tokens)
    (ids, mask), *views = sft_examples(tokenizer, task, 0, flawed=False)
    assert (ids, mask) == sft_example(tokenizer, task, 0, flawed=False)
    reply = task.demonstration(task.train_problem(0))
    assert len(views) == 2  # three products: threads 2 and 3
    for k, (view_ids, view_mask) in enumerate(views, 2):
        trained = tokenizer.decode([t for t, m in zip(view_ids, view_mask) if m])
        context = tokenizer.decode(view_ids[: view_mask.index(1)])
        assert trained.startswith(f"<Thread>{k}: ") and trained.endswith("</Thread>")
        assert trained in reply and "<Thread>" not in context.split("</Outlines>")[-1]
        assert context.endswith("</Outlines>") and view_ids[-1] != tokenizer.eos_token_id
        assert ids[: view_mask.index(1)] == view_ids[: view_mask.index(1)]  # the same prefix
    sequential = build_task(load_config(None, ["task.name=product_sum", "task.parallel_share=0"]))
    assert len(sft_examples(tokenizer, sequential, 0, flawed=False)) == 1


def test_hint_draws_cover_every_level_and_none_at_share_zero():
    rng = random.Random(0)
    draws = [draw_hint(rng, 0.5, 3) for _ in range(3000)]
    assert 0.45 < draws.count(None) / 3000 < 0.55
    assert {d for d in draws if d} == {(1, 3), (2, 3), (3, 3)}
    untouched, probe = random.Random(1), random.Random(1)
    assert draw_hint(untouched, 0.0, 3) is None and untouched.random() == probe.random()


def test_a_hinted_warm_start_has_a_key_of_its_own():
    plain = load_config(None, [])
    hints = load_config(None, ["model.pretrain_hint_share=0.5"])
    halves = load_config(None, ["model.pretrain_hint_share=0.5", "model.pretrain_hint_segments=2"])
    keys = {warm_start_key(c, build_task(c)) for c in (plain, hints, halves)}
    assert len(keys) == 3


def test_warm_start_is_cached_by_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    cfg = load_config(None, ["model.pretrain_steps=2", "model.pretrain_batch_size=4"])
    calls = []
    path = ensure_warm_start(cfg, build_task(cfg), lambda step, loss: calls.append(step))
    assert (
        calls == [1, 2]
        and (path / "config.json").is_file()
        and path == warm_start_path(cfg, build_task(cfg))
    )
    assert ensure_warm_start(cfg, build_task(cfg), lambda step, loss: calls.append(step)) == path
    assert calls == [1, 2]  # the second call reused the cache
    other = load_config(
        None, ["model.pretrain_steps=2", "model.pretrain_batch_size=4", "task.digits=2"]
    )
    assert warm_start_path(other, build_task(other)) != path


def test_runs_that_start_together_build_one_warm_start(tmp_path, monkeypatch):
    """The second run waits on the first one's lock and loads its model, instead of training
    its own (and both renaming over one another)."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    cfg = load_config(None, ["model.pretrain_steps=2", "model.pretrain_batch_size=4"])
    start, steps, paths = threading.Barrier(2), [], []

    def on_step(step, loss):
        steps.append(step)
        time.sleep(0.5)  # the other run is past its cache check by now, waiting on the lock

    def run():
        start.wait()
        paths.append(ensure_warm_start(cfg, build_task(cfg), on_step))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert steps == [1, 2] and paths == [warm_start_path(cfg, build_task(cfg))] * 2
    assert (paths[0] / "config.json").is_file()


@pytest.mark.parametrize(
    ("overrides", "rows"),
    [
        ([], 32),  # arithmetic's own batch
        (["model.pretrain_batch_size=5"], 5),  # the config's wins
        (["task.name=countdown"], 64),  # a task that names none gets the default
    ],
)
def test_warm_start_batch_is_the_configs_else_the_tasks_own(tokenizer, overrides, rows):
    cfg = load_config(None, ["model.pretrain_steps=1", *overrides])
    task = build_task(cfg)
    model = build_model("nano", tokenizer)
    seen = []
    model.register_forward_hook(lambda module, args, kwargs, out: seen.append(
        kwargs["input_ids"].shape[0]), with_kwargs=True)  # fmt: skip
    supervised_train(model, tokenizer, task, cfg)
    assert seen == [rows]
    # Keyed on the batch it resolves to: spelling out the task's own is the same warm start.
    spelled = load_config(
        None, ["model.pretrain_steps=1", *overrides, f"model.pretrain_batch_size={rows}"]
    )
    assert warm_start_key(spelled, build_task(spelled)) == warm_start_key(cfg, task)


def test_warm_start_key_follows_resolved_task_settings():
    # Keyed on the settings with defaults filled in: spelling out a default changes nothing,
    # so a changed default cannot reuse a model warm-started under the old one.
    def key(*overrides):
        cfg = load_config(None, ["task.name=guess_number", *overrides])
        return warm_start_key(cfg, build_task(cfg))

    implicit = key()
    assert key("task.max_guesses=8") == implicit
    assert key("task.max_guesses=6") != implicit


def test_warm_start_key_follows_how_the_task_writes_its_demonstrations(monkeypatch):
    cfg = load_config(None, ["task.name=guess_number"])
    before = warm_start_key(cfg, build_task(cfg))
    task = build_task(cfg)
    demonstration = task.demonstration
    monkeypatch.setattr(task, "demonstration", lambda p, flawed=False: demonstration(p, not flawed))
    assert warm_start_key(cfg, task) != before


def test_warm_start_key_follows_the_data_files_contents(tmp_path):
    path = tmp_path / "data.jsonl"

    def key_with(rows, *overrides):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        cfg = load_config(None, ["task.name=jsonl", f"task.path={path}", *overrides])
        return warm_start_key(cfg, build_task(cfg))

    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(10)]
    before = key_with(rows)
    assert key_with(rows) == before
    assert key_with(rows[:9] + [{"prompt": "9+9=", "answer": "19"}]) != before  # same path
    # Which rows are skipped depends on the room left for a prompt, so that is in the key too.
    skip = key_with(rows, "task.long_prompts=skip")
    assert skip != before and key_with(rows, "task.long_prompts=skip") == skip
    assert key_with(rows, "task.long_prompts=skip", "rollout.max_new_tokens=64") != skip


def test_a_debates_warm_start_shows_half_its_demonstrations_in_the_critics_layout(tokenizer):
    cfg = load_config(None, ["debate.rounds=2", "debate.shown=3", "model.lora.r=4"])
    task = build_task(cfg)
    rng, drawn = random.Random(0), []
    for index in range(400):
        drawn.append((index, draw_critique(rng, task, index, cfg)))
    shown = [(i, c) for i, c in drawn if c is not None]
    assert 160 < len(shown) < 240  # CRITIQUE_SHARE = 0.5 of 400
    flawed_answers = 0
    for index, critique in shown:
        problem = task.train_problem(index)
        right = task.demonstration(problem).split("#### ")[1]
        wrong = task.demonstration(problem, flawed=True).split("#### ")[1]
        assert len(critique) == 3 and set(critique) <= {right, wrong}  # read as the verifier does
        flawed_answers += sum(a != right for a in critique)
    # shown answers are flawed at the warm start's share (0.6) where the flaw changes the answer
    assert 0.3 < flawed_answers / (3 * len(shown)) < 0.65
    ids, mask = sft_example(tokenizer, task, shown[0][0], False, critique=shown[0][1])
    prompt = tokenizer.decode(ids[: mask.index(1)])
    assert "Earlier answers:\n- " + "\n- ".join(shown[0][1]) in prompt
    assert prompt.rstrip().endswith(task.train_problem(shown[0][0]).prompt + "<|end|><|assistant|>")
    # without a debate nothing is drawn, so every other warm start keeps its data and its key
    plain, state = load_config(), rng.getstate()
    assert draw_critique(rng, task, 0, plain) is None and rng.getstate() == state
    assert warm_start_key(cfg, task) != warm_start_key(plain, build_task(plain))


@pytest.mark.parametrize(
    ("lengths", "pieces"), [([40, 42, 38, 41], 1), ([5, 60, 12, 33, 7, 58, 20, 44], 4)]
)
def test_sft_backward_gives_the_one_batch_loss_and_gradient(
    tokenizer, monkeypatch, lengths, pieces
):
    """Mixed lengths run as length-sorted pieces; the loss and gradient are the one padded
    batch's mean over trained tokens (and similar lengths take that one batch)."""
    rng = random.Random(0)
    examples = [
        ([rng.randrange(8, 100) for _ in range(n)], [0] * (n // 3) + [1] * (n - n // 3))
        for n in lengths
    ]
    model = build_model("nano", tokenizer, seed=0)

    def gradient(fn):
        model.zero_grad()
        value = fn()
        return value, [p.grad.clone() for p in model.parameters()]

    def whole():
        input_ids, attention, labels = padded(examples, tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        return loss.item()

    want, want_grads = gradient(whole)
    calls = []
    monkeypatch.setattr(warmstart, "padded", lambda *a: calls.append(a) or padded(*a))
    got, got_grads = gradient(lambda: sft_backward(model, examples, tokenizer.pad_token_id))
    assert len(calls) == pieces
    # the model's loss is taken in float32 (as transformers computes it), hence the tolerance
    assert got == pytest.approx(want, abs=1e-6)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-7)


WORD_PROBLEMS = [  # a small file: 32 training rows once 8 are held out for eval
    "task.name=jsonl", "task.path=examples/data/arithmetic_word.jsonl",
    "task.prompt_field=question", "task.answer_field=answer", "task.solution_field=solution",
    "task.eval_share=0.2", "model.pretrain_batch_size=8",
]  # fmt: skip


def test_a_files_warm_start_stops_on_its_held_out_rows_with_their_best_weights(
    tokenizer, monkeypatch
):
    cfg = load_config(
        None, [*WORD_PROBLEMS, "model.pretrain_steps=1000", "model.pretrain_batch_size=2"]
    )
    task = build_task(cfg)
    held = warmstart.held_out_rows(cfg, task)
    assert held == round(0.1 * task.train_size) > 0
    losses, snapshots, trained_on = iter([3.0, 2.0, 2.5, 2.1, 2.4, 2.0, 9.9]), [], []
    examples = warmstart.sft_examples

    def measured(model, tokenizer, task, rows):
        assert rows == held
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return next(losses)

    def recorded(tokenizer, task, index, *args):
        trained_on.append(index)
        return examples(tokenizer, task, index, *args)

    monkeypatch.setattr(warmstart, "held_out_loss", measured)
    monkeypatch.setattr(warmstart, "sft_examples", recorded)
    model = build_model("nano", build_tokenizer())
    log = supervised_train(model, build_tokenizer(), task, cfg)
    # best at the 2nd measurement (step 50); 4 without a new best (2.0 is no better) stop it
    assert log["steps"] == 150 and [s for s, _ in log["held_out_loss"]] == [
        25,
        50,
        75,
        100,
        125,
        150,
    ]
    assert all(torch.equal(v, snapshots[1][k]) for k, v in model.state_dict().items())
    assert min(trained_on) >= held and len(set(trained_on)) > held  # held-out rows never trained


def test_held_out_rows_are_kept_only_for_a_finite_task_with_rows_to_spare():
    arithmetic = load_config(None, [])
    assert warmstart.held_out_rows(arithmetic, build_task(arithmetic)) == 0  # generated
    off = load_config(None, [*WORD_PROBLEMS, "model.pretrain_holdout=0"])
    assert warmstart.held_out_rows(off, build_task(off)) == 0
    on = load_config(None, WORD_PROBLEMS)
    assert warm_start_key(on, build_task(on)) != warm_start_key(off, build_task(off))


def test_a_files_warm_start_logs_its_held_out_loss(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    cfg = load_config(None, [*WORD_PROBLEMS, "model.pretrain_steps=25"])
    path = ensure_warm_start(cfg, build_task(cfg))
    log = json.loads((path / warmstart.WARM_START_LOG).read_text())
    ((step, loss),) = log["held_out_loss"]
    assert step == 25 and 0 < loss < 10
    assert f"lowest ({loss:.3f}) at step 25" in warmstart.held_out_summary(path)


def test_the_held_out_loss_is_one_token_weighted_mean_however_it_is_chunked(monkeypatch):
    cfg = load_config(None, WORD_PROBLEMS)
    task, tokenizer = build_task(cfg), build_tokenizer()
    model = build_model("nano", tokenizer)
    examples = [e for index in range(5) for e in sft_examples(tokenizer, task, index, False)]
    input_ids, attention, labels = padded(examples, tokenizer.pad_token_id)
    with torch.no_grad():
        whole = float(model(input_ids=input_ids, attention_mask=attention, labels=labels).loss)
    monkeypatch.setattr(warmstart, "DEFAULT_BATCH_SIZE", 2)  # pieces of 2, 2 and 1 rows
    assert warmstart.held_out_loss(model, tokenizer, task, 5) == pytest.approx(whole, rel=1e-6)


def test_a_large_files_held_out_rows_are_capped():
    cfg = load_config(None, WORD_PROBLEMS)

    class LargeFile:
        train_size = 100_000

    assert warmstart.held_out_rows(cfg, LargeFile()) == warmstart.HOLDOUT_CAP


def test_zero_pretrain_steps_saves_the_one_layer_model_untrained(tmp_path, monkeypatch):
    """model.pretrain_steps = 0 with model.layers = 1: the policy is the one-layer model exactly
    as initialised from train.seed, with the task's added tokens (RL from scratch)."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    settings = ["task.name=graph_walk", "task.layout=tokens", "model.pretrain_steps=0",
                "model.layers=1", "train.seed=3"]  # fmt: skip
    cfg = load_config(None, settings)
    task = build_task(cfg)
    path = ensure_warm_start(cfg, task, lambda step, loss: pytest.fail("trained a step"))
    saved = AutoModelForCausalLM.from_pretrained(path)
    fresh = build_model("nano", build_tokenizer(task.added_tokens), seed=3, layers=1)
    assert saved.config.num_hidden_layers == 1
    assert saved.config.vocab_size == len(build_tokenizer()) + len(task.added_tokens)
    for (name, a), (_, b) in zip(saved.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name
    deeper = load_config(None, [s for s in settings if not s.startswith("model.layers")])
    assert warm_start_key(deeper, build_task(deeper)) != warm_start_key(cfg, task)
