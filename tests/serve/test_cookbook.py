"""tinker-cookbook's own recipes, unmodified from PyPI, train through `rlvr serve` on a locally
built tiny model: sl_basic on a file of arithmetic conversations (its loss falls), then
math_rl's arithmetic environment from that checkpoint (it trains, and its sampler agrees with
its trainer). The recipes run in .venv-cookbook (scripts/cookbook_tests.sh); the service runs
here. The reward over a longer run is in docs/serve.md: 4 steps of a tiny model are noise."""

import json
import os
import random
import subprocess

import pytest

from rlvr.models import tiny

from .conftest import KEY, running

PYTHON = os.environ.get("RLVR_COOKBOOK_PYTHON")
# a skip at setup, not at import: the report then carries the cookbook mark that
# tests/allowed_skips.toml allows
pytestmark = [
    pytest.mark.cookbook,
    pytest.mark.skipif(
        not PYTHON, reason="RLVR_COOKBOOK_PYTHON is unset (scripts/cookbook_tests.sh)"
    ),
]


def conversations(path, count=2000, seed=0):
    """What is x + y? with the arithmetic environment's own few-shot turn before it."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            x, y = rng.randint(0, 100), rng.randint(0, 100)
            turns = [("user", "What is 4 + 5?"), ("assistant", "9"),
                     ("user", f"What is {x} + {y}?"), ("assistant", str(x + y))]  # fmt: skip
            f.write(json.dumps({"messages": [{"role": r, "content": c} for r, c in turns]}) + "\n")


def recipe(module, url, log_path, *settings):
    env = {**os.environ, "TINKER_API_KEY": KEY, "OMP_NUM_THREADS": "1"}
    command = [PYTHON, "-m", module, f"base_url={url}", f"log_path={log_path}", *settings]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def test_sl_basic_then_math_rl_arithmetic_learn_through_rlvr_serve(tmp_path):
    model = tmp_path / "tiny"  # a locally built model: rlvr's tiny Llama, untrained
    tokenizer = tiny.build_tokenizer()
    tiny.build_model("nano", tokenizer, 0).save_pretrained(model)
    tokenizer.save_pretrained(model)
    data = tmp_path / "arithmetic.jsonl"
    conversations(data)
    with running(tmp_path / "state", api_key=KEY, model=str(model)) as (url, _):
        sft = recipe(
            "tinker_cookbook.recipes.sl_basic", url, tmp_path / "sl",
            f"model_name={model}", "renderer_name=role_colon", "learning_rate=2e-3",
            "num_epochs=2", "eval_every=0",
            "dataset_builder=tinker_cookbook.supervised.data:FromConversationFileBuilder",
            f"dataset_builder.file_path={data}",
            f"dataset_builder.common_config.model_name_for_tokenizer={model}",
            "dataset_builder.common_config.renderer_name=role_colon",
            "dataset_builder.common_config.max_length=128",
            "dataset_builder.common_config.batch_size=64",
        )  # fmt: skip
        nll = [row["train_mean_nll"] for row in sft if "train_mean_nll" in row]
        assert nll[-1] < 0.5 * nll[0], nll
        checkpoint = json.loads(
            (tmp_path / "sl" / "checkpoints.jsonl").read_text().splitlines()[-1]
        )
        rl = recipe(
            "tinker_cookbook.recipes.math_rl.train", url, tmp_path / "rl",
            f"model_name={model}", "renderer_name=role_colon", "env=arithmetic",
            "group_size=8", "groups_per_batch=8", "max_tokens=12", "learning_rate=1e-3",
            "max_steps=4", "eval_every=0", "save_every=0", "behavior_if_log_dir_exists=delete",
            f"load_checkpoint_path={checkpoint['state_path']}",
        )  # fmt: skip
    assert [row["step"] for row in rl] == [0, 1, 2, 3]
    assert all(-0.1 <= row["env/all/reward/total"] <= 1.0 for row in rl)
    # the sampler's logprobs are the trainer's: the recipe's own check of sampling against
    # training, which a stale sampler snapshot or a padding mismatch would break
    assert all(abs(row["optim/kl_sample_train_v1"]) < 1e-4 for row in rl), rl
    assert rl[-1]["optim/entropy"] != rl[0]["optim/entropy"]  # the policy moved
