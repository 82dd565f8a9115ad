"""`rlvr serve` on the tiny model in a background thread, for the real tinker SDK to call."""

import socket
import threading
import time
from contextlib import contextmanager

import pytest

pytest.importorskip("tinker")
uvicorn = pytest.importorskip("uvicorn")

from rlvr.serve import build_service  # noqa: E402
from rlvr.serve.app import build_app  # noqa: E402

KEY = "tml-test-key"


@contextmanager
def running(state_dir, api_key=None, max_request_mb=64.0):
    """(base url, Service) of a service on a free local port, stopped on exit like a killed
    process: nothing of it survives but what it wrote to state_dir."""
    service = build_service("tiny", state_dir, seed=0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        build_app(service, api_key, max_request_mb), host="127.0.0.1", port=port, log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", service
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        service.worker.shutdown(wait=True)


@pytest.fixture
def served(tmp_path):
    with running(tmp_path / "state") as found:
        yield found
