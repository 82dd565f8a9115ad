import pytest
import torch
from peft import LoraConfig, get_peft_model

from rlvr.cli import main, parser
from rlvr.models.loading import load_model
from rlvr.models.merging import (
    MERGES,
    MergeSettings,
    dare_linear,
    dare_ties,
    merge_state_dicts,
    ties,
    tsv,
)
from rlvr.models.tiny import build_model

TWO = MergeSettings(weights=(1.0, 1.0))


def test_average_and_task_arithmetic_by_hand():
    base = {"w": torch.tensor([1.0, 2.0, 3.0])}
    models = [{"w": torch.tensor([2.0, 2.0, 0.0])}, {"w": torch.tensor([1.0, 4.0, 6.0])}]
    # task vectors [1, 0, -3] and [0, 2, 3]
    assert merge_state_dicts(base, models, "average", TWO)["w"].tolist() == [1.5, 3.0, 3.0]
    weighted = MergeSettings(weights=(2.0, 1.0), scale=0.5)
    merged = merge_state_dicts(base, models, "task_arithmetic", weighted)["w"]
    assert merged.tolist() == [2.0, 3.0, 1.5]  # base + 0.5 * (2 * d1 + d2)


def test_ties_keeps_the_top_share_elects_a_sign_and_averages_the_agreeing():
    deltas = torch.tensor([[1.0, -2.0, 3.0, 0.1], [-1.5, 1.0, 2.0, -0.2]])
    # density 0.5 keeps the 2 largest of each: [0, -2, 3, 0] and [-1.5, 0, 2, 0]; the summed
    # signs elect [-, -, +, +]; each entry averages the kept values that agree with it.
    merged = ties(deltas, MergeSettings(weights=(1.0, 1.0), density=0.5))
    assert merged.tolist() == [-1.5, -2.0, 2.5, 0.0]


def test_dare_drops_a_share_rescales_the_rest_and_follows_its_seed():
    delta = torch.full((1, 20000), 0.3)
    settings = MergeSettings(weights=(1.0,), density=0.8, seed=5)
    merged = dare_linear(delta, settings)
    kept = merged != 0
    assert 0.79 < kept.float().mean() < 0.81
    assert torch.allclose(merged[kept], torch.tensor(0.3 / 0.8))
    assert torch.equal(merged, dare_linear(delta, settings))
    assert not torch.equal(merged, dare_linear(delta, MergeSettings((1.0,), density=0.8, seed=6)))
    before = torch.random.get_rng_state()
    dare_ties(delta.repeat(2, 1), MergeSettings((1.0, 1.0), density=0.8))
    assert torch.equal(torch.random.get_rng_state(), before)  # the global generator is untouched


def test_tsv_sums_task_matrices_in_orthogonal_subspaces():
    torch.manual_seed(0)
    first, second = torch.zeros(4, 4), torch.zeros(4, 4)
    first[:2, :2], second[2:, 2:] = torch.randn(2, 2), torch.randn(2, 2)
    merged = tsv(torch.stack([first, second]), TWO)
    assert torch.allclose(merged, first + second, atol=1e-6)


def test_tsv_keeps_each_tasks_top_singular_values_in_one_orthonormal_basis():
    torch.manual_seed(1)
    deltas = torch.randn(3, 12, 9)
    merged = tsv(deltas, TWO)
    keep = 9 // 3
    kept = torch.cat([torch.linalg.svdvals(d)[:keep] for d in deltas])
    # The decorrelated bases are orthonormal, so the merge's singular values are those kept.
    values = torch.linalg.svdvals(merged)[: 3 * keep]
    assert torch.allclose(values, kept.sort(descending=True).values, atol=1e-5)
    bias = torch.randn(3, 5)
    assert torch.allclose(tsv(bias, MergeSettings((1.0,) * 3, scale=2.0)), 2 * bias.mean(0))


def test_a_model_of_another_shape_is_refused_by_name():
    base = {"layer.w": torch.zeros(2, 2)}
    with pytest.raises(ValueError, match=r"model 2's parameter layer.w is \(3, 2\)"):
        merge_state_dicts(base, [{"layer.w": torch.ones(2, 2)}, {"layer.w": torch.ones(3, 2)}],
                          "average", TWO)  # fmt: skip
    with pytest.raises(ValueError, match="3 weights for 2 models"):
        merge_state_dicts(base, [base, base], "average", MergeSettings((1.0, 1.0, 1.0)))


def test_the_cli_lists_every_registered_method():
    merge = parser()._subparsers._group_actions[0].choices["merge"]
    method = next(a for a in merge._actions if a.dest == "method")
    assert method.help.split(" | ") == list(MERGES)


def _shifted(model, name: str, amount: float):
    with torch.no_grad():
        model.get_parameter(name).add_(amount)
    return model


def test_rlvr_merge_writes_a_loadable_model_from_full_models_and_an_adapter(tmp_path, tokenizer):
    build_model("nano", tokenizer, seed=0).save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    name = "model.layers.0.mlp.down_proj.weight"
    full = _shifted(build_model("nano", tokenizer, seed=0), name, 0.5)
    full.save_pretrained(tmp_path / "full")
    tokenizer.save_pretrained(tmp_path / "full")
    lora = get_peft_model(
        build_model("nano", tokenizer, seed=0),
        LoraConfig(r=2, lora_alpha=2, target_modules=["down_proj"], init_lora_weights=False),
    )
    lora.save_pretrained(tmp_path / "adapter")
    adapter_delta = lora.merge_and_unload().get_parameter(name) - build_model(
        "nano", tokenizer, seed=0
    ).get_parameter(name)

    args = ["merge", "--method", "task_arithmetic", "--base", str(tmp_path / "base")]
    main([*args, "--models", str(tmp_path / "full"), str(tmp_path / "adapter"),
          "--weights", "1", "2", "--out", str(tmp_path / "merged")])  # fmt: skip
    merged, merged_tokenizer = load_model(str(tmp_path / "merged"))
    base = build_model("nano", tokenizer, seed=0)
    expected = base.get_parameter(name) + 0.5 + 2 * adapter_delta
    assert torch.allclose(merged.get_parameter(name), expected, atol=1e-6)
    other = "model.layers.1.self_attn.q_proj.weight"
    assert torch.equal(merged.get_parameter(other), base.get_parameter(other))
    assert merged_tokenizer.get_vocab() == tokenizer.get_vocab()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--method", "mean"], "'mean' is not registered. Known: average"),
        (["--method", "ties", "--weights", "1"], "--weights has 1 values for 2 --models"),
        (["--method", "ties", "--density", "0"], "--density 0.0"),
    ],
)
def test_bad_merge_arguments_fail_before_any_model_loads(extra, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["merge", "--base", "missing", "--models", "a", "b", "--out", str(tmp_path / "o"),
              *extra])  # fmt: skip
    assert message in capsys.readouterr().err
