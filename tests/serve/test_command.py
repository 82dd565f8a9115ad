"""`rlvr serve`'s command line: it refuses to open training to the network without a key."""

import pytest

from rlvr.cli import parser
from rlvr.config import ConfigError
from rlvr.serve import build_service, is_local, main, served_settings


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_addresses_are_local(host):
    assert is_local(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "example.org"])
def test_other_addresses_are_not(host):
    assert not is_local(host)


def test_binding_beyond_localhost_needs_a_key():
    args = parser().parse_args(["serve", "--host", "0.0.0.0"])
    args.api_key = None  # whatever RLVR_SERVE_API_KEY holds here
    with pytest.raises(ConfigError, match="--api-key"):
        main(args)


def test_a_key_the_sdk_would_refuse_is_refused_first():
    args = parser().parse_args(["serve", "--host", "0.0.0.0", "--api-key", "secret"])
    with pytest.raises(ConfigError, match="tml-"):
        main(args)


def test_only_distributed_and_vllm_settings_are_taken_from_the_command_line():
    args = parser().parse_args(
        ["serve", "distributed.backend=ray", "distributed.trainer_ranks=2",
         "rollout.vllm.kv_cache_gib=2"]
    )  # fmt: skip
    cfg = served_settings(args.overrides)
    assert (cfg.distributed.backend, cfg.distributed.trainer_ranks) == ("ray", 2)
    assert cfg.rollout.vllm.kv_cache_gib == 2
    with pytest.raises(ConfigError, match="distributed.\\* and rollout.vllm.\\* settings only"):
        served_settings(["distributed.backend=ray", "model.name=gpt2"])
    with pytest.raises(ConfigError, match="trainer_ranks"):
        served_settings(["distributed.trainer_ranks=0"])


def test_an_unknown_engine_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="the engines are hf and vllm"):
        build_service("tiny", tmp_path / "state", engine="sglang")
    assert not (tmp_path / "state").exists()
