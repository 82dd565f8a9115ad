import os

import pytest
import torch

from rlvr.models.tiny import build_model, build_tokenizer

# Under pytest-xdist the workers split the cores: each running torch on all of them would
# oversubscribe the machine many times over.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, os.cpu_count() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """A test that pins torch to one thread (to match spawned ranks' floats) must not leave every
    later test in the session running on one core."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    """An untrained nano model: enough for anything that does not need it to be good."""
    torch.manual_seed(0)
    return build_model("nano", tokenizer, seed=0).eval()


@pytest.fixture(scope="session")
def rlvr_home(tmp_path_factory):
    """One warm-start cache for the whole test session, shared by the xdist workers (whose
    temporary folders sit side by side): a warm start is built once, by whichever worker needs
    it first, while the others wait on its lock."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    home = root / "rlvr_home"
    home.mkdir(exist_ok=True)
    return home


@pytest.fixture
def fast_overrides(rlvr_home, tmp_path, monkeypatch):
    """A run small enough for a unit test: few warm-start steps, small batches, short replies."""
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    return [
        "model.pretrain_steps=20",
        "model.pretrain_batch_size=64",  # the warm start these tests were tuned on
        "rollout.batch_size=16",
        "rollout.group_size=4",
        "rollout.max_new_tokens=24",
        "task.eval_size=8",
        "train.eval_k=2",
        "train.micro_batch_size=8",
        f"log.run_dir={tmp_path / 'runs'}",
        "log.quiet=true",
        "log.report=false",  # about 2 s of plots a run; the report's own tests turn it on
    ]


@pytest.fixture(scope="session")
def skip_without_namespaces():
    """Called with a SandboxUnavailableError: skips when the kernel refuses namespaces here (a
    container without them), and re-raises any other sandbox failure, which is a bug."""

    def check(error: Exception) -> None:
        if "unshare" in str(error):
            pytest.skip(f"no namespaces on this machine: {error}")
        raise error

    return check
