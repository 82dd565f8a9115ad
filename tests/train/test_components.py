import importlib.util
import json
import math
import shutil
import subprocess
import sys

import pytest
import torch

from rlvr.algos.advantages import AdvInputs, gae_targets
from rlvr.algos.losses import LossInputs
from rlvr.config import ConfigError, load_config
from rlvr.rewards.penalties import LengthPenalty
from rlvr.rollout.build import build_engine
from rlvr.train.components import build_components
from rlvr.types import Problem


def components(*overrides):
    return build_components(load_config(None, list(overrides)))


def test_reward_settings_reach_the_reward_and_its_weight_applies():
    built = components(
        "task.rewards={numeric: 1.0, length: 0.5}",
        "task.reward_params.length={target_chars: 1, max_chars: 2}",
    )
    problem = Problem(id="p", prompt="2+3=", answer="5")
    score = built.reward(problem, "#### 5")  # correct, and 6 characters: full length penalty
    assert score.value == pytest.approx(1.0 - 0.5)
    assert score.info == {"numeric": 1.0, "length": -1.0, "length/chars": 6.0}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task.reward_params.length={target_chars: 5}"], r"'length' is not a reward of this run"),
        (
            ["task.rewards={exact: 1.0}", "task.reward_params.exact={strict: true}"],
            r"reward 'exact' takes no settings",
        ),
        (
            ["task.rewards={length: 1.0}", "task.reward_params.length={target_charz: 5}"],
            r"task\.reward_params\.length\.target_charz.*Did you mean "
            r"'task\.reward_params\.length\.target_chars'",
        ),
        (
            ["task.rewards={length: 1.0}", "task.reward_params.length={max_chars: -3}"],
            r"task\.reward_params\.length\.max_chars = -3",
        ),
    ],
)
def test_reward_settings_mistakes_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        components(*overrides)


def test_numeric_tolerance_is_a_setting():
    problem = Problem(id="p", prompt="pi=", answer="3.14159")
    loose = components("task.reward_params.numeric={tolerance: 0.001}").verifier
    assert loose(problem, "#### 3.1416").value == 1.0
    assert components().verifier(problem, "#### 3.1416").value == 0.0  # default: 1e-6


def test_penalty_defaults_apply_without_settings():
    built = components("task.rewards={numeric: 1.0, length: 1.0}")
    assert built.reward(Problem(id="p", prompt="?", answer="5"), "#### 5").value == 1.0
    assert LengthPenalty.Params().target_chars > len("#### 5")


def test_a_run_with_code_rewards_refuses_to_start_without_isolation(tmp_path):
    """With user namespaces forbidden (the sysctl set to 0 inside a user namespace), the code
    reward's sandbox cannot isolate, and `rlvr train` stops before any work."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    data = tmp_path / "code.jsonl"
    rows = [
        {"prompt": f"Write add{i}(a, b).", "tests": [f"assert add{i}(1, 2) == 3"], "solution": "x"}
        for i in range(10)
    ]
    data.write_text("\n".join(map(json.dumps, rows)))
    script = (
        "from rlvr.cli import main; import sys; sys.exit(main(["
        f"'train', 'task.name=jsonl', 'task.path={data}', 'task.verifier=code', "
        "'task.answer_field=null', 'task.metadata_fields=[tests]', 'task.eval_size=1', "
        f"'log.run_dir={tmp_path / 'runs'}']))"
    )
    command = f'echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c "{script}"'
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", command],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    if "unshare failed" in result.stderr:
        pytest.skip(f"this machine allows no user namespaces at all: {result.stderr.strip()}")
    assert result.returncode != 0
    assert "cannot isolate programs" in result.stderr and "Fix:" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_vllm_engine_without_vllm_stops_before_any_work(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "vllm" else find_spec(name, *a),
    )
    with pytest.raises(ConfigError, match=r"vLLM is not installed.*vllm_cpu_tests\.sh"):
        build_components(load_config(None, ["rollout.engine=vllm"]))


def test_an_unknown_engine_names_the_key_and_the_closest_name():
    with pytest.raises(ConfigError, match=r"rollout.engine = 'vlm'.*Did you mean 'vllm'"):
        build_engine(load_config(None, ["rollout.engine=vlm"]), None, None, "unused")
    with pytest.raises(ConfigError, match=r"rollout.engine = 'vlm'"):  # and before any work
        build_components(load_config(None, ["rollout.engine=vlm"]))


def test_a_module_attr_engine_builder_builds_the_engine(tmp_path, monkeypatch):
    (tmp_path / "my_engine_for_test.py").write_text(
        "def build(cfg, model, tokenizer, model_path):\n"
        "    return ('my engine', cfg.rollout.max_batch_size, model, tokenizer, model_path)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["rollout.engine=my_engine_for_test:build", "rollout.max_batch_size=7"])
    built = build_engine(cfg, "model", "tokenizer", "path")
    assert built == ("my engine", 7, "model", "tokenizer", "path")


@pytest.mark.parametrize(
    "overrides",
    [["algo.loss=soft_q"], ["algo.advantage=soft_bellman"]],
    ids=["loss-alone", "estimator-alone"],
)
def test_soft_q_learning_comes_as_its_loss_and_its_targets_together(overrides):
    with pytest.raises(ConfigError, match="algo.loss=soft_q with algo.advantage=soft_bellman"):
        components(*overrides)
    built = components("algo.loss=soft_q", "algo.advantage=soft_bellman")
    assert built.requires == {"old_logprobs", "old_normaliser", "ref_logprobs", "ref_normaliser"}


def test_soft_q_learnings_estimator_and_loss_must_read_q_with_the_same_beta():
    pair = ["algo.loss=soft_q", "algo.advantage=soft_bellman"]
    with pytest.raises(ConfigError, match=r"algo\.advantage_params\.beta = 0\.2 but "
                       r"algo\.loss_params\.beta = 0\.1.*set algo\.advantage_params\.beta and "
                       r"algo\.loss_params\.beta to the same value"):  # fmt: skip
        components(*pair, "algo.advantage_params.beta=0.2")
    built = components(*pair, "algo.advantage_params.beta=0.2", "algo.loss_params.beta=0.2")
    assert built.advantage.keywords["params"].beta == built.loss.keywords["params"].beta == 0.2


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["algo.loss=sapo", "algo.loss_params.tau_poss=2"],
            r"unknown key 'algo\.loss_params\.tau_poss'\. Did you mean 'algo\.loss_params\.tau_pos'",
        ),
        (
            ["algo.advantage=passk", "algo.advantage_params.kk=2"],
            r"unknown key 'algo\.advantage_params\.kk'\. Did you mean 'algo\.advantage_params\.k'",
        ),
        (["algo.loss=dual_clip", "algo.loss_params.c=0.5"], r"algo\.loss_params\.c = 0\.5"),
        (
            ["algo.loss_params.c=3"],
            r"algo\.loss_params: loss 'ppo_clip' takes no settings; fix: remove algo\.loss_params",
        ),
        (
            ["algo.advantage_params.k=3"],
            r"advantage 'grpo' takes no settings; fix: remove algo\.advantage_params",
        ),
    ],
)
def test_an_estimators_or_losss_settings_fail_before_any_work_naming_the_key(
    overrides, message, monkeypatch
):
    def no_work(*args, **kwargs):
        raise AssertionError("a bad setting must fail before the task is built")

    monkeypatch.setattr("rlvr.train.components.build_task", no_work)
    with pytest.raises(ConfigError, match=message):
        components(*overrides)


def test_a_losss_settings_reach_the_loss_it_computes():
    # sapo, one token with A = 1 at ratio 2: loss -sigmoid(tau (r - 1)) 4 / tau
    one = torch.ones(1, 1, dtype=torch.float64)
    x = LossInputs(-one, -one - math.log(2.0), one, one, num_tokens=1.0, num_seqs=1)
    built = components("algo.loss=sapo", "algo.loss_params={tau_pos: 2.0}")
    cfg = load_config(None, ["algo.loss=sapo"])
    got = built.loss(x, cfg.algo).loss.item()
    assert got == pytest.approx(-4 / 2 / (1 + math.exp(-2)), abs=1e-12)
    default = components("algo.loss=sapo").loss(x, cfg.algo).loss.item()
    assert default == pytest.approx(-4 / (1 + math.exp(-1)), abs=1e-12)
    assert built.loss.__name__ == "sapo" and built.loss.advantage_weighted


def test_an_estimators_settings_reach_its_critic_targets_and_group_minimum():
    built = components("algo.advantage=gae", "algo.advantage_params.lam_mode=length_adaptive",
                       "rollout.group_size=1")  # fmt: skip
    x = AdvInputs(torch.ones(1), torch.zeros(1, dtype=torch.long), torch.ones(1, 3))
    x.values = torch.tensor([[0.2, 0.5, 0.1]])
    cfg = load_config(None, ["algo.lam=0.5"])
    # length-adaptive: the critic's targets use lam = 1, the discounted return to go (1 here)
    targets = built.advantage.critic_targets(x, cfg.algo)
    assert targets.tolist() == [[1.0, 1.0, 1.0]]
    assert built.advantage.critic_targets.func is gae_targets
    assert built.requires == {"values"}
    assert components("algo.advantage=passk", "algo.advantage_params.k=7").min_group_size == 8
    with pytest.raises(ConfigError, match=r"needs group_size >= 9\. Fix: rollout\.group_size=9"):
        components("algo.advantage=passk", "algo.advantage_params.k=8")


def test_replay_refuses_a_multi_turn_task(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"prompt": "1+1=", "response": "#### 2"}\n')
    with pytest.raises(ConfigError, match="rollout.replay answers each prompt with one"):
        components("task.name=guess_number", f"rollout.replay={log}")


def test_solution_prefix_needs_problems_with_a_worked_solution():
    rewards = 'task.rewards={"countdown": 1.0, "solution_prefix": 0.5}'
    with pytest.raises(ConfigError, match="solution_field"):
        build_components(load_config(None, ["task.name=countdown", rewards]))
    cfg = load_config(None, ['task.rewards={"numeric": 1.0, "solution_prefix": 0.5}'])
    components = build_components(cfg)
    problem = components.task.train_problem(0)
    assert components.reward(problem, components.task.demonstration(problem)).value == 1.5
