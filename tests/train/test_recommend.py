import re
from pathlib import Path

import pytest

from rlvr.api import _config
from rlvr.config import ConfigError, load_config
from rlvr.tasks import TASKS
from rlvr.train.recommend import CLEAN_BASE_LR, apply_recommended, recommend

SETTINGS = Path(__file__).parents[2] / "docs" / "settings.md"


def test_the_default_run_is_left_as_it_is():
    cfg = load_config()
    recommended, chosen = recommend(cfg)
    assert chosen == []
    assert recommended.model_dump() == cfg.model_dump()


def test_a_task_gets_its_tuned_settings_except_where_the_user_set_them():
    cfg, chosen = recommend(load_config(None, ["task.name=countdown", "rollout.max_new_tokens=32"]))
    assert {r.key: r.value for r in chosen} == {
        "model.preset": "micro",
        "model.pretrain_steps": 1200,
        "algo.kl_coef": 0.01,
    }
    assert (cfg.model.preset, cfg.model.pretrain_steps, cfg.algo.kl_coef) == ("micro", 1200, 0.01)
    assert cfg.rollout.max_new_tokens == 32
    assert cfg.task.name == "countdown" and cfg.rollout.batch_size == 128


def test_a_key_set_in_a_file_counts_as_set(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[task]\nname = "guess_number"\n[rollout]\nbatch_size = 32\n')
    cfg, chosen = recommend(load_config(path))
    assert [r.key for r in chosen] == ["rollout.max_new_tokens"]
    assert (cfg.rollout.batch_size, cfg.rollout.max_new_tokens) == (32, 24)


def test_a_setting_equal_to_the_default_is_not_reported():
    _, chosen = recommend(load_config(None, ["model.name=some/model", "train.micro_batch_size=4"]))
    keys = {r.key: r.value for r in chosen}
    assert keys == {"rollout.max_new_tokens": 512, "train.lr": 1e-6}


@pytest.mark.parametrize(("lora", "lr"), [(0, 1e-6), (16, 2e-5)])
def test_a_pretrained_model_gets_a_rate_for_full_or_lora_training(lora, lr):
    cfg, chosen = recommend(load_config(None, ["model.name=org/model", f"model.lora.r={lora}"]))
    assert cfg.train.lr == lr and cfg.rollout.max_new_tokens == 512
    assert all("pretrained" in r.source for r in chosen)
    # the tiny model's task settings do not apply to it
    cfg, _ = recommend(load_config(None, ["model.name=org/model", "task.name=countdown"]))
    assert cfg.model.preset == "nano" and cfg.algo.kl_coef == 0.0


def test_a_clean_warm_start_gets_a_smaller_lr_unless_its_task_or_the_user_chose_one():
    cfg, chosen = recommend(load_config(None, ["model.pretrain_flawed_share=0"]))
    assert cfg.train.lr == CLEAN_BASE_LR < load_config().train.lr
    assert [r.source for r in chosen if r.key == "train.lr"] == [
        "a clean warm start: model.pretrain_flawed_share=0 on the tiny model"
    ]
    # product_sum tuned its own lr for long replies; a flawed warm start keeps the default
    clean_product_sum = ["task.name=product_sum", "model.pretrain_flawed_share=0"]
    assert recommend(load_config(None, clean_product_sum))[0].train.lr == 2e-5
    assert recommend(load_config(None, ["model.pretrain_flawed_share=0.1"]))[0].train.lr == 1e-4
    user_lr = ["model.pretrain_flawed_share=0", "train.lr=1e-4"]
    assert recommend(load_config(None, user_lr))[0].train.lr == 1e-4
    # a pretrained model has no warm start
    pretrained = ["model.name=org/model", "model.pretrain_flawed_share=0"]
    assert recommend(load_config(None, pretrained))[0].train.lr == 1e-6


def test_a_clash_with_a_user_setting_names_the_recommended_keys():
    # nim recommends 64 completions a step, which 128 per group cannot fill
    with pytest.raises(ConfigError, match=r"rollout\.batch_size=64.*set those keys yourself"):
        recommend(load_config(None, ["task.name=nim", "rollout.group_size=128"]))


def test_the_console_names_each_choice_unless_quiet(capsys):
    apply_recommended(load_config(None, ["task.name=nim"]))
    err = capsys.readouterr().err
    assert "rollout.batch_size=64  (nim on the tiny model)" in err
    apply_recommended(load_config(None, ["task.name=nim", "log.quiet=true"]))
    assert capsys.readouterr().err == ""


def test_the_api_applies_them_to_files_dicts_and_configs():
    from_dict = _config({"task": {"name": "nim"}, "train": {"lr": 3e-4}}, ())
    assert (from_dict.rollout.batch_size, from_dict.train.lr) == (64, 3e-4)
    from_config = _config(load_config(None, ["task.name=nim", "rollout.batch_size=16"]), ())
    assert (from_config.rollout.batch_size, from_config.rollout.max_new_tokens) == (16, 24)
    assert _config(None, ("task.name=nim",)).rollout.max_new_tokens == 24


def test_the_settings_page_lists_every_tasks_settings():
    section = SETTINGS.read_text().split("\n## Recommended settings\n")[1].split("```")[0]
    rows = dict(re.findall(r"^\| (`\w+`(?:, `\w+`)*) \| (.+) \|$", section, re.M))
    listed = {name.strip("`"): text for names, text in rows.items() for name in names.split(", ")}
    for name, task_cls in TASKS.items():
        tuned = getattr(task_cls, "recommended_tiny", {})
        expected = " ".join(f"{k}={v}" for k, v in tuned.items()) if tuned else "none: the defaults"
        assert listed.get(name, "").strip("`") == expected, name
