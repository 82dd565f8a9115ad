import pytest

from rlvr.algos.kl import k3
from rlvr.config import RENAMED, Config, ConfigError, dump_config, load_config
from rlvr.train.components import build_components


def test_defaults_validate():
    cfg = load_config()
    assert cfg == Config()
    assert cfg.rollout.batch_size % cfg.rollout.group_size == 0
    assert cfg.task.params == {}


def test_toml_file_with_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        '[algo]\nkl_coef = 0.05\n\n[train]\nsteps = 10\n\n[task]\nname = "arithmetic"\ndigits = 4\n'
    )
    cfg = load_config(path, ["train.steps=20"])
    assert cfg.algo.kl_coef == 0.05
    assert cfg.train.steps == 20
    assert cfg.task.params == {"digits": 4}


def test_yaml_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        'rollout:\n  group_size: 4\n  batch_size: 16\n  stop: ["\\n\\n"]\ntask:\n  rewards: {numeric: 1.0}\n'
    )
    cfg = load_config(path)
    assert (cfg.rollout.group_size, cfg.rollout.batch_size) == (4, 16)
    assert cfg.rollout.stop == ["\n\n"]
    assert cfg.task.rewards == {"numeric": 1.0}


def test_empty_yaml_file_gives_defaults(tmp_path):
    path = tmp_path / "empty.yml"
    path.write_text("")
    assert load_config(path) == Config()


def test_overrides_are_yaml_typed():
    cfg = load_config(
        None,
        [
            "algo.kl_coef=0.02",
            "task.rewards={numeric: 1.0, format: 0.1}",
            "rollout.stop=[x, y]",
            "log.quiet=true",
            "algo.normalize_std=false",
        ],
    )
    assert cfg.algo.kl_coef == 0.02
    assert cfg.task.rewards == {"numeric": 1.0, "format": 0.1}
    assert cfg.rollout.stop == ["x", "y"]
    assert cfg.log.quiet is True and cfg.algo.normalize_std is False


def test_later_override_wins():
    assert load_config(None, ["train.steps=5", "train.steps=7"]).train.steps == 7


def test_task_extras_kept_in_params():
    cfg = load_config(None, ["task.digits=4", "task.operations=[add, mul]"])
    assert cfg.task.params == {"digits": 4, "operations": ["add", "mul"]}
    assert "name" not in cfg.task.params


def test_unknown_key_did_you_mean():
    with pytest.raises(ConfigError, match=r"algo\.kl_cof.*algo\.kl_coef"):
        load_config(None, ["algo.kl_cof=0.1"])


def test_unknown_key_in_file_did_you_mean(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[rollout]\ngroup_sise = 4\n")
    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        load_config(path)


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rollout.batch_size=abc"])
    assert "rollout.batch_size" in str(e.value) and "'abc'" in str(e.value)


def test_wrong_type_inside_mapping_names_key_and_value():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["task.rewards={numeric: high}"])
    assert "task.rewards.numeric = 'high'" in str(e.value)


def test_wrong_type_inside_list_names_value():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rollout.stop=[x, {a: 1}]"])
    assert "rollout.stop.1 = {'a': 1}" in str(e.value)


@pytest.mark.parametrize("text", ["2024", "on", "1.5"])
def test_string_field_accepts_number_like_override(text):
    assert load_config(None, [f"log.name={text}"]).log.name == text


@pytest.mark.parametrize(("key", "word"), [("algo.tis", "off"), ("algo.reward_timing", "delayed")])
def test_a_choice_of_words_keeps_the_word_yaml_would_read_as_a_bool(key, word):
    cfg = load_config(None, [f"{key}={word}"])
    assert cfg.model_dump()[key.split(".")[0]][key.split(".")[1]] == word


def test_batch_size_not_divisible_by_group_size():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rollout.batch_size=10", "rollout.group_size=4"])
    msg = str(e.value)
    assert "rollout.batch_size" in msg and "rollout.group_size" in msg
    assert "fix" in msg and "rollout.batch_size=8" in msg


def test_batch_size_smaller_than_group_size_suggests_valid_size():
    with pytest.raises(ConfigError, match=r"rollout\.batch_size=8\b"):
        load_config(None, ["rollout.batch_size=4", "rollout.group_size=8"])
    load_config(None, ["rollout.batch_size=8", "rollout.group_size=8"])


@pytest.mark.parametrize("value", [0, -5])
def test_max_new_tokens_must_be_positive(value):
    with pytest.raises(ConfigError, match="rollout.max_new_tokens"):
        load_config(None, [f"rollout.max_new_tokens={value}"])


def test_override_without_equals():
    with pytest.raises(ConfigError, match="no '='"):
        load_config(None, ["train.steps"])


def test_override_without_dot():
    with pytest.raises(ConfigError, match=r"dotted.*train\.steps"):
        load_config(None, ["steps=3"])


def test_override_into_a_value_errors():
    with pytest.raises(ConfigError, match="not a section"):
        load_config(None, ["train.steps=5", "train.steps.x=1"])


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_malformed_toml_names_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[train\nsteps = \n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value) and "TOML" in str(e.value)


def test_malformed_yaml_names_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(path)


def test_unknown_extension(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("{}")
    with pytest.raises(ConfigError, match="extension"):
        load_config(path)


def test_file_must_hold_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def test_dump_round_trips(tmp_path):
    cfg = load_config(None, ["task.digits=4", "algo.kl_coef=0.02", "rollout.stop=[x]"])
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(cfg))
    again = load_config(path)
    assert again == cfg and again.task.params == {"digits": 4}


def test_hash_ignores_logging_and_steps_only():
    base = load_config()
    assert load_config(None, ["log.name=x", "train.steps=3"]).hash() == base.hash()
    assert load_config(None, ["train.lr=0.5"]).hash() != base.hash()


# algo.q_beta has two new homes: its own test
ALGO_MOVED = sorted(k for k, v in RENAMED.items() if v.startswith("algo.") and k != "algo.q_beta")


@pytest.mark.parametrize("old", ALGO_MOVED)
def test_a_key_moved_to_an_estimators_or_losss_settings_names_its_new_home(old):
    new = RENAMED[old]
    owner = "algo.advantage" if new.startswith("algo.advantage_params.") else "algo.loss"
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"{old}=1"])
    assert f"'{old}' moved to '{new}' (a setting of the chosen {owner}" in str(e.value)
    assert f"fix: write {new}" in str(e.value)


def test_q_beta_names_both_of_its_new_homes(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[algo]\nadvantage = "soft_bellman"\nloss = "soft_q"\nq_beta = 0.2\n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    both = "'algo.advantage_params.beta' and 'algo.loss_params.beta'"
    assert f"'algo.q_beta' moved to {both}" in str(e.value)


def test_an_estimators_and_a_losss_settings_are_tables_of_algo(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[algo]\nloss = "sapo"\n\n[algo.loss_params]\ntau_pos = 2.0\n\n'
        "[algo.advantage_params]\nk = 3\n"
    )
    cfg = load_config(path, ["algo.loss_params.tau_neg=0.5"])
    assert cfg.algo.loss_params == {"tau_pos": 2.0, "tau_neg": 0.5}
    assert cfg.algo.advantage_params == {"k": 3}
    assert load_config().algo.loss_params == load_config().algo.advantage_params == {}


# --- build_components: names resolved before any work ---------------------------------


def test_build_components_defaults():
    c = build_components(load_config())
    assert c.kl is None
    assert c.advantage.__name__ == "grpo"
    assert build_components(load_config(None, ["algo.kl_coef=0.1"])).kl is k3


def test_group_size_one_with_grpo():
    cfg = load_config(None, ["rollout.group_size=1"])
    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        build_components(cfg)


def test_unknown_task_param():
    with pytest.raises(ConfigError, match=r"task\.digitz.*task\.digits"):
        build_components(load_config(None, ["task.digitz=3"]))


def test_bad_task_param_value_names_key():
    with pytest.raises(ConfigError, match=r"task\.digits = 99"):
        build_components(load_config(None, ["task.digits=99"]))


def test_unknown_task_name():
    with pytest.raises(ConfigError, match=r"task\.name.*countdown"):
        build_components(load_config(None, ["task.name=countdwn"]))


def test_unknown_advantage_did_you_mean():
    with pytest.raises(ConfigError, match=r"algo\.advantage.*Did you mean 'grpo'"):
        build_components(load_config(None, ["algo.advantage=grpoo"]))


def test_unknown_reward_component():
    cfg = load_config(None, ["task.rewards={numerc: 1.0, format: 0.1}"])
    with pytest.raises(ConfigError, match=r"task\.rewards\.numerc.*Did you mean 'numeric'"):
        build_components(cfg)


def test_reward_mode_selects_the_combination():
    from rlvr.types import Problem

    problem = Problem("p", "2+2=", answer="4")
    for mode, expected in (("sum", 1.0), ("gated", 0.0)):
        cfg = load_config(
            None, ["task.rewards={format: 1.0, numeric: 1.0}", f"task.reward_mode={mode}"]
        )
        # Right, but the marker is not at the end, so the format reward gives 0.
        assert build_components(cfg).reward(problem, r"\boxed{4} is it").value == expected


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_a_config_file_that_is_not_utf8_names_the_file_line_and_fix(tmp_path, suffix):
    path = tmp_path / f"run{suffix}"
    body = '[log]\nname = "caf\u00e9"\n' if suffix == ".toml" else 'log:\n  name: "caf\u00e9"\n'
    path.write_bytes(body.encode("latin-1"))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    column = body.splitlines()[1].index("\u00e9") + 1
    assert f"config file {path} line 2: not UTF-8 text (byte 0xe9 at column {column})" in message
    assert "fix: save the file as UTF-8" in message and f"run.utf8{suffix}" in message


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["rollout.max_staleness=1"], ["distributed.backend=ray"]),
        (
            ["distributed.backend=ray", "rollout.max_staleness=1"],
            ["algo.tis=token", "algo.loss=dis"],
        ),
        (["algo.loss=dis", "algo.tis=token"], ["weigh it twice", "algo.tis=off"]),
        (["distributed.backend=ray", "rollout.partial_tokens=8"], ["rollout.max_staleness=1"]),
        (
            [
                "distributed.backend=ray",
                "rollout.max_staleness=1",
                "algo.tis=token",
                "rollout.partial_tokens=8",
                "rollout.stop=['\\n']",
            ],
            ["rollout.stop", "rollout.partial_tokens=0"],
        ),  # fmt: skip
        (["distributed.trainer_sharding=fsdp"], ["distributed.backend=ray", "trainer_ranks=2"]),
        (
            ["distributed.backend=ray", "distributed.trainer_sharding=fsdp"],
            ["has 1;", "distributed.trainer_ranks=2"],
        ),
    ],
)
def test_distributed_settings_that_cannot_work_name_the_fix(overrides, names):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert all(name in str(e.value) for name in names)


def test_dis_trains_stale_samples_without_the_decoupled_objective():
    """dis's ratio is to the engine that sampled, which is the correction a stale sample needs."""
    cfg = load_config(None, ["distributed.backend=ray", "rollout.max_staleness=1", "algo.loss=dis"])
    assert cfg.algo.tis == "off"


def test_partial_rollouts_accepted_with_their_prerequisites():
    cfg = load_config(None, [
        "distributed.backend=ray", "rollout.max_staleness=1", "algo.tis=token",
        "rollout.partial_tokens=8",
    ])  # fmt: skip
    assert cfg.rollout.partial_tokens == 8
