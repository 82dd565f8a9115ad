from rlvr.config import load_config
from rlvr.train.setup import build_task
from rlvr.train.warmstart import ensure_warm_start, sft_example, warm_start_path


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
    assert calls == [1, 2] and (path / "config.json").is_file() and path == warm_start_path(cfg)
    assert ensure_warm_start(cfg, build_task(cfg), lambda step, loss: calls.append(step)) == path
    assert calls == [1, 2]  # the second call reused the cache
    other = load_config(
        None, ["model.pretrain_steps=2", "model.pretrain_batch_size=4", "task.digits=2"]
    )
    assert warm_start_path(other) != path
