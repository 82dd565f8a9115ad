"""The trainer never names an algorithm: estimators, losses, KL estimators and aggregations
come from the registries through the config, so adding one never touches rlvr/train/."""

import builtins
import io
import tokenize
from pathlib import Path

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.losses import AGGREGATIONS, LOSSES

TRAIN = Path(__file__).resolve().parents[2] / "rlvr" / "train"


def named_algorithms(source: str, names: set[str]) -> list[str]:
    found, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING and tok.string.strip("\"'") in names:
            found.append(tok.string)
        elif tok.type == tokenize.NAME and tok.string in names and previous != ".":
            if not hasattr(builtins, tok.string):
                found.append(tok.string)
        previous = tok.string
    return found


def test_trainer_is_algorithm_blind():
    names = set(ADVANTAGES) | set(LOSSES) | set(KL_ESTIMATORS) | set(AGGREGATIONS)
    names |= {
        fn.__name__ for fn in (*ADVANTAGES.values(), *LOSSES.values(), *KL_ESTIMATORS.values())
    }
    offenders = {
        path.name: hits
        for path in sorted(TRAIN.glob("*.py"))
        if (hits := named_algorithms(path.read_text(), names))
    }
    assert not offenders, f"rlvr/train names algorithms: {offenders}"


def test_the_check_catches_a_named_algorithm():
    assert named_algorithms('if cfg.algo.advantage == "grpo":\n    pass\n', {"grpo"}) == ['"grpo"']
    assert named_algorithms("from x import grpo\n", {"grpo"}) == ["grpo"]
    assert named_algorithms("y = x.abs()\n", {"abs"}) == []
