import copy

import pytest
import torch
from peft import PeftModel
from torch import nn
from transformers import AutoModelForCausalLM

from rlvr.config import ConfigError, LoraSettings, ModelConfig, load_config
from rlvr.models.lora import (
    adapter_state_dict,
    adapters_disabled,
    add_adapter,
    apply_lora,
    check_targets_early,
    is_lora,
    load_adapter_state,
    merged_state_dict,
    named_adapter_state,
    save_final,
    trainable_state_dict,
    unwrapped,
    use_adapter,
)
from rlvr.train.trainer import Trainer

IDS = torch.tensor([[2, 10, 11, 12, 13, 14], [2, 20, 21, 22, 23, 24]])


def lora_model(base, r=4, **settings):
    """A LoRA copy of `base` whose adapters are not the identity (lora_B is zero at init)."""
    model = apply_lora(copy.deepcopy(base), LoraSettings(r=r, **settings))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model.eval()


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


def test_only_the_adapters_train_and_their_size_is_r_times_in_plus_out(tiny_model):
    r = 4
    model = lora_model(tiny_model, r=r)
    assert is_lora(model) and not is_lora(tiny_model)
    linear = [
        m
        for name, m in tiny_model.named_modules()
        if isinstance(m, nn.Linear) and name != "lm_head"  # all-linear leaves the head out
    ]
    assert len(linear) == 4 * 7  # q k v o gate up down in each of the nano model's 4 layers
    expected = sum(r * (m.in_features + m.out_features) for m in linear)
    trainable = trainable_state_dict(model)
    assert sum(p.numel() for p in trainable.values()) == expected
    assert all("lora_" in name for name in trainable)
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert sum(p.numel() for p in frozen) == sum(p.numel() for p in tiny_model.parameters())


def test_trainable_names_are_the_same_for_every_wrap(tiny_model):
    first = trainable_state_dict(lora_model(tiny_model))
    second = trainable_state_dict(apply_lora(copy.deepcopy(tiny_model), LoraSettings(r=4)))
    assert list(first) == list(second)
    assert {k: v.shape for k, v in first.items()} == {k: v.shape for k, v in second.items()}


def test_target_modules_pick_the_adapted_layers(tiny_model):
    model = lora_model(tiny_model, target_modules=["q_proj", "v_proj"])
    layers = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable_state_dict(model)}
    assert layers == {"q_proj", "v_proj"}
    model = lora_model(tiny_model, target_modules=r".*\.0\.mlp\.down_proj")
    assert len(trainable_state_dict(model)) == 2  # lora_A and lora_B of one layer


def test_merged_state_dict_equals_merge_and_unload_and_leaves_the_model_untouched(tiny_model):
    model = lora_model(tiny_model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    before_logits = logits(model)
    merged = merged_state_dict(model)
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    assert list(merged) == list(expected) == list(tiny_model.state_dict())  # plain HF names
    for key in expected:
        assert torch.equal(merged[key], expected[key]), key
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           tiny_model.state_dict()["model.layers.0.self_attn.q_proj.weight"])  # fmt: skip
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(logits(model), before_logits)


def test_merged_weights_give_the_lora_models_outputs_and_keep_embeddings_tied(tiny_model):
    model = lora_model(tiny_model)
    merged = merged_state_dict(model)
    assert merged["lm_head.weight"].data_ptr() == merged["model.embed_tokens.weight"].data_ptr()
    plain = copy.deepcopy(tiny_model)
    plain.load_state_dict(merged)
    assert torch.allclose(logits(plain), logits(model), atol=1e-5)


def test_adapters_disabled_computes_as_the_base_and_restores_the_adapters(tiny_model):
    model = lora_model(tiny_model)
    with_adapters = logits(model)
    with adapters_disabled(model):
        assert torch.equal(logits(model), logits(tiny_model))
    assert torch.equal(logits(model), with_adapters)
    assert not torch.allclose(with_adapters, logits(tiny_model), atol=1e-4)
    with pytest.raises(TypeError, match="needs a LoRA"):
        with adapters_disabled(tiny_model):
            pass


def test_adapter_state_dict_is_peft_layout_of_the_trainable_weights(tiny_model):
    model = lora_model(tiny_model)
    adapter = adapter_state_dict(model)
    trainable = trainable_state_dict(model)
    assert len(adapter) == len(trainable)
    assert sum(v.numel() for v in adapter.values()) == sum(v.numel() for v in trainable.values())
    assert all(".default." not in k for k in adapter)  # adapter_model.safetensors names


def test_save_final_writes_a_plain_merged_model_and_the_adapter(tiny_model, tokenizer, tmp_path):
    model = lora_model(tiny_model)
    before = logits(model)
    save_final(model, tokenizer, tmp_path / "final")
    assert torch.equal(logits(model), before)  # saving did not merge into the live model
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert not is_lora(plain)
    assert plain.lm_head.weight.data_ptr() == plain.model.embed_tokens.weight.data_ptr()
    assert torch.allclose(logits(plain.eval()), before, atol=1e-5)
    reloaded = PeftModel.from_pretrained(copy.deepcopy(tiny_model), tmp_path / "final" / "adapter")
    assert torch.allclose(logits(reloaded.eval()), before, atol=1e-6)
    assert (tmp_path / "final" / "tokenizer_config.json").is_file()


def test_a_second_adapter_trains_alone_while_active_and_saves_alone(
    tiny_model, tokenizer, tmp_path
):
    model = lora_model(tiny_model)
    generator = logits(model)
    add_adapter(model, "critic", LoraSettings(r=2))
    assert model.active_adapter == "default"
    assert torch.equal(logits(model), generator)  # adding it changed nothing active
    own = set(trainable_state_dict(model))
    with use_adapter(model, "critic"):
        trainable = trainable_state_dict(model)
        assert trainable and all(".critic." in name for name in trainable)
        assert not own & set(trainable)
        with torch.no_grad():
            for name, p in trainable.items():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
        critic = logits(model)
        save_final(model, tokenizer, tmp_path / "critic")
    assert model.active_adapter == "default" and set(trainable_state_dict(model)) == own
    assert torch.equal(logits(model), generator)
    assert not torch.allclose(critic, generator)
    # the critic's adapter alone, at the root of final/adapter, on the untouched base
    saved = tmp_path / "critic" / "adapter"
    assert (saved / "adapter_model.safetensors").is_file() and not (saved / "critic").exists()
    reloaded = PeftModel.from_pretrained(copy.deepcopy(tiny_model), saved)
    assert torch.allclose(logits(reloaded.eval()), critic, atol=1e-6)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "critic")
    assert torch.allclose(logits(merged.eval()), critic, atol=1e-5)


def test_a_second_adapter_may_name_layers_the_first_already_wraps(tiny_model):
    """The target check sees peft's wrapped layers as adaptable (it refused them before)."""
    model = lora_model(tiny_model, target_modules=["q_proj", "v_proj"])
    add_adapter(model, "second", LoraSettings(r=4, target_modules=["q_proj", "v_proj"]))
    weights = named_adapter_state(model, "default")
    assert weights and not any("default" in k or "embed" in k for k in weights)
    first = logits(model)
    with use_adapter(model, "second"):
        assert not torch.allclose(logits(model), first)  # a fresh adapter: the base's outputs
        load_adapter_state(model, "second", weights)
        second = logits(model)
    assert torch.equal(second, first)  # the first adapter's weights, now in the second


def test_unwrapped_is_the_hugging_face_model(tiny_model):
    model = lora_model(tiny_model)
    assert type(unwrapped(model)) is type(tiny_model)
    assert unwrapped(tiny_model) is tiny_model


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (["q_prj"], r"\['q_prj'\] match no layer"),
        (["q_proj", "vproj"], r"\['vproj'\] match no layer"),
        ("attention.*", r"\['attention\.\*'\] match no layer"),
        (["layers.0"], r"matches \['model.layers.0'\], which are not linear"),
    ],
)
def test_target_modules_that_fit_no_layer_name_the_layers_there_are(tiny_model, targets, message):
    with pytest.raises(ConfigError, match=message) as e:
        apply_lora(copy.deepcopy(tiny_model), LoraSettings(r=4, target_modules=targets))
    assert "model.lora.target_modules" in str(e.value)
    assert "'q_proj'" in str(e.value) and "'down_proj'" in str(e.value)  # what there is


def test_targets_are_checked_before_any_weights_load(tiny_model, tokenizer, tmp_path):
    bad = {"r": 4, "target_modules": ["qproj"]}
    with pytest.raises(ConfigError, match=r"\['qproj'\] match no layer.*'q_proj'"):
        check_targets_early(ModelConfig(lora=bad))  # the tiny model, before its warm start
    tiny_model.save_pretrained(tmp_path / "local")
    tokenizer.save_pretrained(tmp_path / "local")
    with pytest.raises(ConfigError, match=r"\['qproj'\] match no layer"):
        check_targets_early(ModelConfig(name=str(tmp_path / "local"), lora=bad))
    check_targets_early(ModelConfig(name=str(tmp_path / "local"), lora={"r": 4}))


def test_a_run_with_a_bad_target_stops_before_the_warm_start(fast_overrides, rlvr_home):
    cfg = load_config(None, [*fast_overrides, "model.lora.r=4", "model.lora.target_modules=x"])
    before = sorted(rlvr_home.rglob("*"))
    with pytest.raises(ConfigError, match="model.lora.target_modules = 'x'"):
        Trainer(cfg)
    assert sorted(rlvr_home.rglob("*")) == before
