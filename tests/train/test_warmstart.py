import json

from rlvr.config import load_config
from rlvr.train.setup import build_task
from rlvr.train.warmstart import ensure_warm_start, sft_example, warm_start_key, warm_start_path


def test_demonstration_example_trains_only_the_reply(tokenizer):
    task = build_task(load_config())
    ids, mask = sft_example(tokenizer, task, 0, flawed=False)
    reply = task.demonstration(task.train_problem(0))
    assert sum(mask) == len(reply) + 1  # one token per character, plus EOS
    assert ids[-1] == tokenizer.eos_token_id and mask[: mask.index(1)] == [0] * mask.index(1)
    assert tokenizer.decode(ids[mask.index(1) : -1]) == reply


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


def test_warm_start_key_follows_resolved_task_settings():
    # Keyed on the settings with defaults filled in: spelling out a default changes nothing,
    # so a changed default cannot reuse a model warm-started under the old one.
    def key(*overrides):
        cfg = load_config(None, ["task.name=guess_number", *overrides])
        return warm_start_key(cfg, build_task(cfg))

    implicit = key()
    assert key("task.max_guesses=8") == implicit
    assert key("task.max_guesses=6") != implicit


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
