"""`rlvr serve` on Ray, through the real tinker SDK: a step split over two trainer ranks equals
the step by hand and leaves the ranks equal, a loaded checkpoint reaches every rank, and the
rollout workers sample what this process would."""

import numpy as np
import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.models import tiny
from rlvr.serve import build_service, in_thread
from rlvr.serve.adapters import AdapterHost
from rlvr.serve.cluster import Cluster
from rlvr.serve.sampler import Sampler, sample_seeds

from .conftest import OPEN, client
from .test_app import (
    LR,
    RANK,
    assert_same_weights,
    datums,
    reference_model,
    reference_step,
    sampled_logprobs,
    sequences,
    sft_step,
)

ray = pytest.importorskip("ray", reason="Ray is an extra: pip install -c constraints.txt '.[ray]'")
tinker = pytest.importorskip("tinker")
types = tinker.types

# never two local Rays at once: the Ray tests share one xdist worker
pytestmark = pytest.mark.xdist_group("digits2")

TWO_BY_TWO = [
    "distributed.backend=ray",
    "distributed.trainer_ranks=2",
    "distributed.rollout_workers=2",
    "distributed.worker_cpus=0.5",
    "distributed.rollout_timeout=120",
]


@pytest.fixture(scope="module")
def cluster_served(tmp_path_factory):
    """(url, Service) of one service on two trainer ranks and two rollout workers, in a local
    Ray for the module."""
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    distributed = load_config(None, TWO_BY_TWO).distributed
    service = build_service("tiny", tmp_path_factory.mktemp("state"), distributed=distributed)
    try:
        with in_thread(service) as url:
            yield url, service
            for made in OPEN.pop(url, []):
                made.close("success").result(timeout=30)
    finally:
        ray.shutdown()


def peer_weights(service, name):
    """The adapter's weights on trainer rank 1."""
    (peer,) = service.trainer.ranks
    return ray.get(peer.state.remote(name))["weights"]


def assert_ranks_equal(service, name):
    here = service.trainer.state(name, optimizer=False)["weights"]
    there = peer_weights(service, name)
    assert sorted(here) == sorted(there)
    for key, value in here.items():
        torch.testing.assert_close(there[key], value, rtol=0, atol=0)


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "ppo"])
def test_a_step_over_two_ranks_equals_the_step_by_hand(cluster_served, loss_fn):
    url, service = cluster_served
    ref, tokenizer = reference_model()
    seqs = sequences(tokenizer)  # two datums: one for each rank
    sampled = sampled_logprobs(ref, seqs)
    training = client(url).create_lora_training_client(base_model="tiny", rank=RANK).result()
    result = training.forward_backward(datums(seqs, loss_fn, sampled), loss_fn).result()
    step = training.optim_step(types.AdamParams(learning_rate=LR)).result()
    want_loss, want_norm = reference_step(ref, seqs, loss_fn, sampled)
    assert result.metrics["loss:sum"] == pytest.approx(want_loss, rel=1e-5)
    assert step.metrics["grad_norm"] == pytest.approx(want_norm, rel=1e-4)
    assert [len(out["logprobs"].to_numpy()) for out in result.loss_fn_outputs] == [
        len(ids) for ids, _, _ in seqs
    ]  # each datum's own, in order, whichever rank computed it
    path = training.save_state("after").result().path
    assert_same_weights(service.read(path)["weights"], ref)
    assert_ranks_equal(service, training.model_id)


def test_a_loaded_checkpoint_reaches_every_rank_and_refusals_change_none(cluster_served):
    url, service = cluster_served
    sc = client(url)
    first = sc.create_lora_training_client(base_model="tiny", rank=RANK, seed=3).result()
    seqs = sequences(first.get_tokenizer())
    sft_step(first, seqs)
    checkpoint = first.save_state("one").result().path
    loaded = sc.create_training_client_from_state_with_optimizer(checkpoint).result()
    bad = [types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                       loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0]})]  # fmt: skip
    with pytest.raises(Exception, match="differ from its 3 input tokens"):
        loaded.forward_backward(bad, "cross_entropy").result()
    assert sft_step(loaded, seqs) == pytest.approx(sft_step(first, seqs), rel=1e-6)
    assert_ranks_equal(service, loaded.model_id)
    for key, value in peer_weights(service, first.model_id).items():  # one Adam state, two copies
        torch.testing.assert_close(peer_weights(service, loaded.model_id)[key], value)


def test_rollout_workers_sample_what_this_process_would(cluster_served, tmp_path):
    url, service = cluster_served
    training = client(url).create_lora_training_client(base_model="tiny", rank=RANK).result()
    seqs = sequences(training.get_tokenizer())
    for _ in range(2):
        sft_step(training, seqs)
    sampling = training.save_weights_and_get_sampling_client().result()
    ids = seqs[0][0]
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=11)
    got = sampling.sample(types.ModelInput.from_ints(ids), 3, params, True).result()
    path = training.save_weights_for_sampler("same").result().path
    tokenizer = tiny.build_tokenizer()
    host = AdapterHost("tiny", tiny.build_model("nano", tokenizer, 0), tokenizer)
    args = (ids, 3, params.model_dump(), True, sample_seeds(params.model_dump(), 3, 0, 1))
    want, prompt_logprobs = Sampler(host).sample("v", lambda: service.read(path), *args)
    assert [s.tokens for s in got.sequences] == [w["tokens"] for w in want]
    for s, w in zip(got.sequences, want, strict=True):
        np.testing.assert_allclose(s.logprobs, w["logprobs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.prompt_logprobs[1:], prompt_logprobs[1:], rtol=1e-5, atol=1e-5)


def test_samples_go_to_the_least_busy_worker(cluster_served):
    url, service = cluster_served
    ids = sequences(tiny.build_tokenizer())[0][0]
    params = {"max_tokens": 48, "temperature": 1.0}
    started = [service.rollout.sample(None, None, ids, 8, params, False, list(range(8)))
               for _ in range(2)]  # fmt: skip
    assert service.rollout.in_flight == [1, 1]  # long samples: neither has finished yet
    assert all(len(f.result(timeout=120)[0]) == 8 for f in started)


def test_sharded_trainer_ranks_are_refused_before_anything_starts(tmp_path):
    distributed = load_config(None, [*TWO_BY_TWO, "distributed.trainer_sharding=fsdp"]).distributed
    with pytest.raises(ConfigError, match="trainer_sharding"):
        build_service("tiny", tmp_path, distributed=distributed)


def test_actors_that_cannot_load_the_base_say_so(cluster_served, tmp_path):
    tokenizer = tiny.build_tokenizer()
    host = AdapterHost("tiny", tiny.build_model("nano", tokenizer, 0), tokenizer)
    one_worker = [*TWO_BY_TWO, "distributed.trainer_ranks=1", "distributed.rollout_workers=1"]
    with pytest.raises(RuntimeError, match="(?s)did not start.*no-such-model"):
        Cluster(load_config(None, one_worker).distributed, host, str(tmp_path / "no-such-model"))
    with pytest.raises(ConfigError, match="already belongs to a torch.distributed group"):
        Cluster(load_config(None, TWO_BY_TWO).distributed, host, "unused")  # the fixture's


def test_a_rank_that_fails_stops_training_calls_until_a_restart(cluster_served):
    url, service = cluster_served
    training = client(url).create_lora_training_client(base_model="tiny", rank=RANK).result()
    seqs = sequences(training.get_tokenizer())
    data = datums(seqs, "cross_entropy", [None] * len(seqs))
    (peer,) = service.trainer.ranks
    ray.get(peer.apply.remote("remove", training.model_id))  # rank 1 loses the client: unequal
    try:
        with pytest.raises(Exception, match="a trainer rank failed"):
            training.forward_backward(data, "cross_entropy").result()
        with pytest.raises(Exception, match="restart rlvr serve and load the last checkpoint"):
            training.optim_step(types.AdamParams(learning_rate=LR)).result()
    finally:
        service.trainer.broken = None  # the other tests' clients are still equal on both ranks
