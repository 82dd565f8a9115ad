"""`rlvr serve` on the tiny model in a background thread, for the real tinker SDK to call."""

from contextlib import contextmanager

import pytest

pytest.importorskip("tinker")
pytest.importorskip("uvicorn")

from rlvr.serve import build_service, in_thread  # noqa: E402

KEY = "tml-test-key"
OPEN: dict[str, list] = {}  # base url -> the SDK clients made on it, closed before it stops


def client(url, api_key=KEY):
    """A tinker ServiceClient on the service at `url`, closed when that service stops (a client
    left open keeps sending heartbeats to a service that is gone)."""
    import tinker

    made = tinker.ServiceClient(base_url=url, api_key=api_key)
    OPEN.setdefault(url, []).append(made)
    return made


@contextmanager
def running(state_dir, api_key=None, max_request_mb=64.0, model="tiny", **options):
    """(base url, Service) of a service on a free local port, stopped on exit like a killed
    process: nothing of it survives but what it wrote to state_dir. `options` go to
    build_service."""
    service = build_service(model, state_dir, seed=0, **options)
    with in_thread(service, api_key, max_request_mb) as url:
        try:
            yield url, service
        finally:
            for made in OPEN.pop(url, []):
                made.close("success").result(timeout=30)


@pytest.fixture
def served(tmp_path):
    with running(tmp_path / "state") as found:
        yield found
