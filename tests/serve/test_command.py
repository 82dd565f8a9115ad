"""`rlvr serve`'s command line: it refuses to open training to the network without a key."""

import pytest

from rlvr.cli import parser
from rlvr.config import ConfigError
from rlvr.serve import is_local, main


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
