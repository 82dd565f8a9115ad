import pytest
from pydantic import BaseModel, ConfigDict

from rlvr.algos.advantages import ADVANTAGES, grpo
from rlvr.algos.losses import LOSSES
from rlvr.config import ConfigError
from rlvr.registry import (
    FnParams,
    bind_params,
    describe,
    fn_params,
    load_object,
    lookup,
    validate_params,
)


def documented():
    """First line.

    More detail that `describe` leaves out.
    """


def undocumented():
    pass


REGISTRY = {
    "alpha": documented,
    "beta": undocumented,
    "gamma": "  A plain string entry\n  on two lines.\n\nA second paragraph.",
}


def test_lookup_by_name():
    assert lookup(ADVANTAGES, "grpo", "algo.advantage") is grpo


def test_lookup_module_attr_path():
    assert lookup({}, "rlvr.algos.advantages:grpo", "algo.advantage") is grpo


def test_lookup_did_you_mean():
    with pytest.raises(ConfigError) as e:
        lookup(REGISTRY, "alhpa", "x.key")
    msg = str(e.value)
    assert (
        "x.key = 'alhpa'" in msg and "Did you mean 'alpha'" in msg and "alpha, beta, gamma" in msg
    )


def test_lookup_no_close_match_lists_known():
    with pytest.raises(ConfigError, match="Known: alpha, beta, gamma") as e:
        lookup(REGISTRY, "zzzzzz", "x.key")
    assert "Did you mean" not in str(e.value)


def test_bad_module_path():
    with pytest.raises(ConfigError, match="cannot import 'rlvr.nonexistent'"):
        load_object("rlvr.nonexistent:thing")


def test_bad_attribute_path():
    with pytest.raises(ConfigError, match="has no attribute 'nope'"):
        lookup({}, "rlvr.algos.advantages:nope", "algo.advantage")


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depth: int = 1


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    digits: int = 2
    inner: Inner = Inner()


def test_validate_params_builds_the_params():
    assert validate_params(Params, {"digits": 3}, "task") == Params(digits=3)


def test_validate_params_names_each_bad_key_with_its_fix():
    with pytest.raises(ConfigError) as e:
        validate_params(Params, {"digts": 3, "inner": {"depth": "deep"}}, "task", ["name"])
    msg = str(e.value)
    assert "unknown key 'task.digts'. Did you mean 'task.digits'" in msg
    assert "task.inner.depth = 'deep'" in msg


class Scale(FnParams):
    factor: float = 2.0


def scaled(x, algo, *, params: Scale):
    """x times the factor."""
    return x * params.factor


scaled.Params = Scale
scaled.requires = ("values",)
scaled.min_group_size = lambda params: int(params.factor)


def test_fn_params_validates_settings_and_bind_params_keeps_the_attributes():
    params = fn_params(scaled, {"factor": 3.0}, "algo.advantage_params", "advantage 'scaled'")
    bound = bind_params(scaled, params)
    assert bound(2.0, None) == 6.0
    assert bound.requires == ("values",) and bound.Params is Scale
    assert bound.min_group_size(params) == 3
    assert bound.__name__ == "scaled" and bound.__doc__ == "x times the factor."


def test_fn_params_names_a_mistyped_key_and_refuses_settings_of_a_function_without_params():
    with pytest.raises(
        ConfigError, match="'algo.loss_params.factr'. Did you mean 'algo.loss_params.factor'"
    ):
        fn_params(scaled, {"factr": 3.0}, "algo.loss_params", "loss 'scaled'")
    assert fn_params(grpo, {}, "algo.advantage_params", "advantage 'grpo'") is None
    with pytest.raises(ConfigError, match="advantage 'grpo' takes no settings; fix: remove"):
        fn_params(grpo, {"k": 2}, "algo.advantage_params", "advantage 'grpo'")


@pytest.mark.parametrize("fn", [*ADVANTAGES.values(), *LOSSES.values()], ids=lambda f: f.__name__)
def test_every_builtin_params_refuses_unknown_keys_and_describes_each(fn):
    model = getattr(fn, "Params", None)
    if model is None:
        return
    assert issubclass(model, FnParams) and model.model_config.get("extra") == "forbid"
    assert all(field.description for field in model.model_fields.values())
    model()  # every setting has a default: a run need not name any


def test_describe_first_doc_lines_sorted():
    assert describe(REGISTRY) == [
        ("alpha", "First line."),
        ("beta", ""),
        ("gamma", "A plain string entry on two lines."),  # the first paragraph, joined
    ]


def test_describe_real_registry():
    docs = dict(describe(ADVANTAGES))
    assert set(docs) == set(ADVANTAGES) and docs["grpo"].startswith("GRPO")


def test_module_attr_paths_import_from_the_working_directory(tmp_path, monkeypatch):
    import sys

    from rlvr.registry import load_object

    (tmp_path / "my_rewards_for_test.py").write_text(
        "def short(problem, response):\n    return 1.0\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_object("my_rewards_for_test:short")(None, "") == 1.0
