import pytest
import torch

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.kv_cache import DynamicLayer, make_room
from rlvr.rollout.tokens import encode_prompt

pytestmark = pytest.mark.skipif(
    DynamicLayer is None,
    reason="this transformers release keeps its cache without layer objects to give room",
)


def prefilled(layer, keys, values):
    layer.update(keys, values)
    return layer


def test_roomy_layer_holds_what_a_dynamic_layer_holds():
    """Appends of one and of several positions and row selections, the decode's operations,
    leave the same keys and values in both; only the copying differs."""
    from rlvr.rollout.kv_cache import RoomyLayer

    gen = torch.Generator().manual_seed(0)
    keys, values = torch.randn(4, 2, 5, 8, generator=gen), torch.randn(4, 2, 5, 8, generator=gen)
    plain = prefilled(DynamicLayer(), keys, values)
    roomy = RoomyLayer(keys, values, room=12)
    steps = [("append", 1), ("append", 1), ("select", [0, 2, 3]), ("append", 3), ("append", 1)]
    steps += [("select", [2, 0]), *[("append", 1)] * 6]
    for op, arg in steps:
        if op == "append":
            rows = plain.keys.shape[0]
            k = torch.randn(rows, 2, arg, 8, generator=gen)
            v = torch.randn(rows, 2, arg, 8, generator=gen)
            expected, got = plain.update(k, v), roomy.update(k, v)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
        else:
            plain.batch_select_indices(torch.tensor(arg))
            roomy.batch_select_indices(torch.tensor(arg))
        assert torch.equal(roomy.keys, plain.keys) and torch.equal(roomy.values, plain.values)
        assert roomy.get_seq_length() == plain.get_seq_length()
    assert roomy.get_seq_length() == 5 + 12  # the whole room used, and the buffer no larger
    assert roomy.key_room.shape[-2] == roomy.value_room.shape[-2] == 5 + 12


def test_appends_write_in_place_and_the_room_doubles_up_to_the_limit():
    from rlvr.rollout.kv_cache import RoomyLayer

    keys = torch.zeros(2, 1, 3, 4)
    roomy = RoomyLayer(keys, keys.clone(), room=40)
    buffers, capacities = set(), []
    for _ in range(40):
        roomy.update(torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))
        buffers.add(roomy.key_room.data_ptr())
        capacities.append(roomy.key_room.shape[-2])
    # capacities 8, 18, 38, then the limit 43: four buffers for 40 appends (concatenating: 40)
    assert len(buffers) == 4
    assert capacities[-1] == 43 and max(capacities) == 43
    assert all(c <= 2 * (3 + n + 1) for n, c in enumerate(capacities))  # at most twice in use


def test_make_room_gives_room_to_plain_dynamic_layers_only():
    from transformers.cache_utils import Cache, DynamicSlidingWindowLayer

    from rlvr.rollout.kv_cache import RoomyLayer

    cache = Cache(layers=[DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=4)])
    for index in range(2):
        cache.update(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4), index)
    make_room(cache, room=8)
    assert type(cache.layers[0]) is RoomyLayer
    assert type(cache.layers[1]) is DynamicSlidingWindowLayer  # keeps its own window logic


def test_the_engine_decodes_into_the_room(tiny_model, tokenizer, monkeypatch):
    """The decode's forwards get a cache whose layers have room, and the samples are those of
    a cache without it (the engine's other tests pin them to teacher-forced logprobs)."""
    import rlvr.rollout.hf_engine as hf_engine
    from rlvr.rollout.kv_cache import RoomyLayer

    prompts = [
        encode_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ["1+2=", "34+5="]
    ]
    prompts = [prompts[0], prompts[0], prompts[1]]
    params, seeds = SamplingParams(12, 1.0), [1, 2, 3]
    layer_kinds = set()

    def note_cache(module, args, kwargs):
        cache = kwargs.get("past_key_values") or kwargs.get("cache")
        layer_kinds.update(type(layer) for layer in getattr(cache, "layers", []))

    hook = tiny_model.register_forward_pre_hook(note_cache, with_kwargs=True)
    try:
        roomy = HFEngine(tiny_model, tokenizer).generate(prompts, params, seeds)
    finally:
        hook.remove()
    assert layer_kinds == {RoomyLayer}
    monkeypatch.setattr(hf_engine, "make_room", lambda cache, room: None)
    plain = HFEngine(tiny_model, tokenizer).generate(prompts, params, seeds)
    assert [c.token_ids for c in roomy] == [c.token_ids for c in plain]
    for a, b in zip(roomy, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)
