"""`rlvr serve` on the tiny model in a background thread, for the real tinker SDK to call."""

from contextlib import contextmanager

import pytest

pytest.importorskip("tinker")
pytest.importorskip("uvicorn")

from rlvr.serve import build_service, in_thread  # noqa: E402

KEY = "tml-test-key"


@contextmanager
def running(state_dir, api_key=None, max_request_mb=64.0, model="tiny"):
    """(base url, Service) of a service on a free local port, stopped on exit like a killed
    process: nothing of it survives but what it wrote to state_dir."""
    service = build_service(model, state_dir, seed=0)
    with in_thread(service, api_key, max_request_mb) as url:
        yield url, service


@pytest.fixture
def served(tmp_path):
    with running(tmp_path / "state") as found:
        yield found
