"""Ray rollout workers and trainer ranks on this machine: what they sample, that runs on them
learn, resume exactly, survive a killed worker, and fail loudly instead of hanging."""

import copy
import json
import threading
import time
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.distributed.local import InProcessRollout
from rlvr.distributed.ray_rollout import RayRollout, RolloutTimeoutError
from rlvr.rollout import HFEngine
from rlvr.rollout.build import make_runner, sampling_params
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.update import batch_logprobs
from rlvr.types import Batch

# One worker runs every test of the digits=2 warm start (this, the e2e runs), so it is built
# once and no worker idles on another's lock; and never are two local Rays up at once.
pytestmark = pytest.mark.xdist_group("digits2")

ray = pytest.importorskip("ray", reason="Ray is an extra: pip install -c constraints.txt '.[ray]'")

SMALL = [
    "distributed.backend=ray",
    "task.digits=2",  # the warm start of the e2e runs: right about half the time, so it learns
    "model.pretrain_steps=400",
    "model.pretrain_batch_size=64",
    "rollout.batch_size=16",
    "rollout.group_size=4",
    "rollout.max_new_tokens=32",
    "task.eval_size=4",
    "train.eval_k=1",
    "train.eval_every=0",
    "algo.tis=token",
]


SAO = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "sao.toml"


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    """One local Ray for the module (rlvr leaves a Ray it did not start running)."""
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def run_killing_a_worker_at_step_2(trainer, worker) -> None:
    """trainer.run(), with `worker` killed as if its process died (Ray restarts the actor)."""
    done = threading.Event()

    def kill_mid_run():
        while trainer.state["step"] < 2 and not done.is_set():
            time.sleep(0.01)
        ray.kill(worker, no_restart=False)

    killer = threading.Thread(target=kill_mid_run)
    killer.start()
    try:
        trainer.run()
    finally:
        done.set()
        killer.join()


def rewards_by_step(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: (r["reward"], r["loss"]) for r in map(json.loads, lines) if "loss" in r}


def test_two_workers_sample_what_one_process_samples(tiny_model, tokenizer, tmp_path):
    torch.set_num_threads(1)  # as in the workers, so the two sides compute the same floats
    tiny_model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    cfg = load_config(None, [*SMALL, "distributed.rollout_workers=2", "task.name=arithmetic"])
    components = build_components(cfg)
    problems = [components.task.train_problem(i) for i in range(5)]  # 3 groups and 2 groups
    runner = make_runner(cfg, tiny_model, tokenizer, components)
    local = InProcessRollout(HFEngine(tiny_model, tokenizer), runner, runner)
    remote = RayRollout(cfg, tokenizer, str(tmp_path / "model"), sampling_params(cfg))
    try:
        remote.sync(tiny_model, 7)
        local.sync(tiny_model, 7)
        expected = local.collect(problems, 4, (0, 0, 3))
        got = remote.collect(problems, 4, (0, 0, 3))
    finally:
        remote.close()
    assert [t.token_ids for t in got] == [t.token_ids for t in expected]
    assert [(t.group_id, t.sample_index) for t in got] == [(i // 4, i) for i in range(20)]
    assert {v for t in got for v in t.versions} == {-1, 7}
    assert [t.versions for t in got] == [t.versions for t in expected]


# the synchronous path is the in-process e2e run; 8: partial rollouts in segments of 8 tokens
@pytest.mark.parametrize("partial", [0, 8])
def test_two_workers_train_the_default_task(rlvr_home, tmp_path, monkeypatch, partial):
    """As tests/e2e/test_learning.py's in-process run, on 2 rollout workers, one-step-off."""
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    cfg = load_config(None, [
        "task.digits=2", "model.pretrain_steps=400", "model.pretrain_batch_size=64", "rollout.batch_size=64",
        "rollout.max_new_tokens=32", "train.steps=12", "task.eval_size=64", "train.eval_every=6",
        f"log.run_dir={tmp_path}", "log.name=ray", "log.quiet=true", "distributed.backend=ray",
        "distributed.rollout_workers=2", "rollout.max_staleness=1", "algo.tis=token",
        f"rollout.partial_tokens={partial}",
    ])  # fmt: skip
    summary = Trainer(cfg).run()
    base, final = summary["base_eval"], summary["final_eval"]
    assert final["eval/accuracy"] >= base["eval/accuracy"] + 0.25
    lines = (tmp_path / "ray" / "metrics.jsonl").read_text().splitlines()
    steps = [r for r in map(json.loads, lines) if "loss" in r]
    assert len(steps) == 12
    assert all(0 <= r["trainer/idle_ratio"] <= 1 for r in steps)
    if not partial:
        assert all(r["async/staleness_max"] == 1 for r in steps[1:])
        return
    # generations in flight at a sync went on under the new weights
    assert all(r["async/staleness_max"] >= 1 for r in steps[1:])
    assert any(r["async/mixed_versions"] > 0 for r in steps)
    assert all(0 <= r["rollout/carried_share"] + r["rollout/early_share"] <= 1 for r in steps)


def test_partial_rollouts_resume_on_the_batch_held_in_the_checkpoint(fast_overrides, tmp_path):
    """A checkpoint waits for every request in flight, so the pools hold nothing then and the
    batch sampled ahead is all there is to keep: the resumed run trains on it. Later batches
    depend on when weights arrived between segments, so they are not replayed."""
    base = [*fast_overrides, *SMALL, "rollout.max_staleness=1", "rollout.partial_tokens=4",
            "distributed.rollout_workers=1", "train.save_every=2"]  # fmt: skip
    cut = Trainer(load_config(None, [*base, "train.steps=2", "log.name=cut"]))
    cut.run()
    saved = torch.load(cut.run_dir.checkpoints / "step-000002" / "trainer.pt", weights_only=False)
    (held,) = saved["state"]["in_flight"].values()
    held_rewards = [t.reward for part, _, _, _ in held for t in part]
    resume = load_config(None, [*base, "train.steps=4", "log.name=cut"])
    Trainer(resume, resume=cut.run_dir.path).run()
    got = rewards_by_step(cut.run_dir.path)
    assert list(got) == [1, 2, 3, 4]
    assert got[3][0] == pytest.approx(sum(held_rewards) / len(held_rewards), abs=1e-6)


def test_a_killed_partial_worker_is_refilled_and_no_group_is_trained_twice(fast_overrides):
    """A partial worker's pool dies with it: the driver admits what it had not returned again on
    the restarted worker, so every group of every batch is trained exactly once."""
    cfg = load_config(None, [
        *fast_overrides, *SMALL, "rollout.max_staleness=1", "rollout.partial_tokens=4",
        "distributed.rollout_workers=2", "train.steps=6", "log.name=partial-killed",
    ])  # fmt: skip
    trainer = Trainer(cfg)
    worker = trainer.source.workers[0]
    trained: list[tuple] = []
    collect = trainer.source.collect

    def recording_collect(problems, group_size, seed):
        trajectories = collect(problems, group_size, seed)
        trained.extend((tuple(t.info["admitted"]), t.sample_index) for t in trajectories)
        return trajectories

    trainer.source.collect = recording_collect
    run_killing_a_worker_at_step_2(trainer, worker)
    assert list(rewards_by_step(trainer.run_dir.path)) == [1, 2, 3, 4, 5, 6]
    assert len(trained) == 6 * 16 and len(set(trained)) == len(trained)
    last = json.loads((trainer.run_dir.path / "metrics.jsonl").read_text().splitlines()[-2])
    assert last["rollout/worker_restarts"] == 1


def test_async_resume_trains_on_the_same_samples(fast_overrides, tmp_path):
    """A checkpoint holds the batch sampled ahead; resuming from it replays the run exactly."""
    base = [*fast_overrides, *SMALL, "rollout.max_staleness=1", "train.save_every=2"]
    whole = Trainer(load_config(None, [*base, "train.steps=4", "log.name=whole"]))
    whole.run()
    cut = Trainer(load_config(None, [*base, "train.steps=2", "log.name=cut"]))
    cut.run()
    Trainer(
        load_config(None, [*base, "train.steps=4", "log.name=cut"]), resume=cut.run_dir.path
    ).run()
    expected, got = rewards_by_step(whole.run_dir.path), rewards_by_step(cut.run_dir.path)
    assert list(got) == [1, 2, 3, 4]
    for step in got:
        assert got[step] == pytest.approx(expected[step], abs=1e-6)


def test_a_killed_worker_is_replaced_and_nothing_is_lost_or_counted_twice(fast_overrides):
    base = [*fast_overrides, *SMALL, "rollout.max_staleness=1", "train.steps=5"]
    calm = Trainer(load_config(None, [*base, "log.name=calm"]))
    calm.run()
    trainer = Trainer(load_config(None, [*base, "log.name=killed"]))
    run_killing_a_worker_at_step_2(trainer, trainer.source.workers[0])
    expected, got = rewards_by_step(calm.run_dir.path), rewards_by_step(trainer.run_dir.path)
    assert list(got) == [1, 2, 3, 4, 5]
    for step in got:  # the same samples, each once: the restarted worker redid its share
        assert got[step] == pytest.approx(expected[step], abs=1e-6)
    last = json.loads((trainer.run_dir.path / "metrics.jsonl").read_text().splitlines()[-2])
    assert last["rollout/worker_restarts"] == 1
    assert len({r for r, _ in got.values()}) > 1  # rewards varied: the comparison has teeth


def test_a_stuck_rollout_raises_instead_of_hanging(fast_overrides):
    trainer = Trainer(load_config(None, [*fast_overrides, *SMALL, "train.steps=2"]))
    trainer.source.timeout = 1e-3  # no worker answers this fast
    with pytest.raises(RolloutTimeoutError, match="distributed.rollout_timeout"):
        trainer.run()


def test_sao_trains_stale_partial_samples_through_dis_on_the_engines_logprobs(fast_overrides):
    """SAO one-step-off with partial rollouts: each token of a stale sample enters the dis loss
    with the logprob of the weights that sampled it (its version, per token), not the policy's
    now."""
    cfg = load_config(SAO, [
        *fast_overrides, *[o for o in SMALL if o != "algo.tis=token"], "rollout.group_size=1",
        "rollout.max_staleness=1", "rollout.partial_tokens=4", "distributed.rollout_workers=1",
        "algo.critic_warmup_steps=0", "train.lr=1e-3", "train.steps=3", "train.micro_batch_size=16",
        "log.name=sao-async",
    ])  # fmt: skip
    trainer = Trainer(cfg)
    model, source, pad = trainer.model, trainer.source, trainer.tokenizer.pad_token_id
    weights = {0: copy.deepcopy(model.state_dict())}  # the policy each version sampled with
    collected, losses = [], []
    sync, collect, loss = source.sync, source.collect, trainer.components.loss

    def snapshotting_sync(policy, version):
        weights[version] = copy.deepcopy(policy.state_dict())
        sync(policy, version)

    def recording_collect(problems, group_size, seed):
        collected.append(collect(problems, group_size, seed))
        return collected[-1]

    def recording_loss(inputs, algo):
        losses.append((trainer.state["step"], inputs))
        return loss(inputs, algo)

    source.sync, source.collect = snapshotting_sync, recording_collect
    trainer.components.loss = recording_loss
    trainer.run()

    # step 2's batch, submitted at step 1: version 1, some tokens 2 (a segment after the sync),
    # 0 for a group carried over from batch 1
    trajectories = collected[2]
    batch = Batch.from_trajectories(trajectories, pad)
    under = {}
    policy = copy.deepcopy(model)
    for version in range(3):
        policy.load_state_dict(weights[version])
        under[version] = batch_logprobs(policy, batch, 16, cfg.rollout.temperature)
    versions = torch.full_like(batch.loss_mask, -1, dtype=torch.long)
    for row, t in enumerate(trajectories):
        versions[row, : len(t.versions) - 1] = torch.tensor(t.versions[1:])
    on = batch.loss_mask.bool()
    assert set(versions[on].tolist()) <= {0, 1, 2} and (versions[on] < 2).any()  # stale tokens
    sampled_by = torch.stack([under[v] for v in range(3)]).gather(0, versions.clamp(min=0)[None])[0]
    torch.testing.assert_close(batch.behaviour_logprobs[on], sampled_by[on], atol=1e-4, rtol=0)
    moved = (under[2] - sampled_by)[on & (versions < 2)].abs().max()
    assert moved > 1e-3  # the policy the loss trains moved since the stale tokens were sampled
    # the loss's own rows, whatever their order: |behaviour - current| over their tokens is the
    # engine's numbers against the policy now (a loss fed the recomputed logprobs would see 0)
    inputs = [i for step, i in losses if step == 2]
    fed = sum(
        float((i.behaviour_logprobs - i.logprobs.detach())[i.loss_mask.bool()].abs().sum())
        for i in inputs
    )
    engine = float((batch.behaviour_logprobs - under[2])[on].abs().sum())
    assert fed == pytest.approx(engine, rel=1e-5) and fed > 0.1
