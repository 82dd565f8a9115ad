import os

import pytest
import torch

from rlvr.models.tiny import build_model, build_tokenizer

# Under pytest-xdist each worker is a process of its own: one torch thread each keeps the
# workers from fighting over the cores (the README's `pytest` runs one worker per core).
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    torch.set_num_threads(1)

# Modules that start a local Ray: run on one worker, so two Rays never share the cores.
ONE_RAY = ("tests/distributed/test_ray_rollout.py", "tests/distributed/test_ray_trainer.py")


def pytest_xdist_make_scheduler(config, log):
    """Tests go one by one to whichever worker is free, except ONE_RAY's, which go together."""
    from xdist.scheduler import LoadScopeScheduling

    class OneRay(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "ray" if nodeid.split("::")[0] in ONE_RAY else nodeid

    return OneRay(config, log)


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
    """One warm-start cache for the whole test session, shared by its workers: the warm start's
    lock makes the second one to need a model wait for it instead of training it again."""
    if WORKER:  # each worker's base temp is a folder of the session's
        home = tmp_path_factory.getbasetemp().parent / "rlvr_home"
        home.mkdir(exist_ok=True)
        return home
    return tmp_path_factory.mktemp("rlvr_home")


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
