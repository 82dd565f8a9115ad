"""The trainer never names an algorithm or a method: estimators, losses, KL estimators and
aggregations come from the registries through the config, and methods act through the hooks of
rlvr/train/hooks.py, so adding one never touches the loop."""

import builtins
import io
import tokenize
from pathlib import Path

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.losses import AGGREGATIONS, LOSSES
from rlvr.methods import METHODS

RLVR = Path(__file__).resolve().parents[2] / "rlvr"
TRAIN = RLVR / "train"
# the loop: what every run steps through, whatever its methods
LOOP = [*sorted(TRAIN.glob("*.py")), RLVR / "rollout" / "runner.py", RLVR / "types.py"]


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


def test_the_loop_names_no_method_and_reads_no_method_setting():
    names = {*METHODS, *(cls.__name__ for cls in METHODS.values())}
    offenders = {
        path.name: hits for path in LOOP if (hits := named_algorithms(path.read_text(), names))
    }
    assert not offenders, f"the loop names methods: {offenders}"
    # the wiring (setup.py) builds the chosen methods from their settings; nothing else reads them
    readers = [p.name for p in LOOP if p.name != "setup.py" and "cfg.methods" in p.read_text()]
    assert not readers, f"the loop reads methods' settings: {readers}"


def test_the_check_catches_a_named_method():
    assert named_algorithms("from rlvr.methods.rfpo import RFPO\n", {"RFPO", "rfpo"}) == ["RFPO"]
    assert named_algorithms('if "rfpo" in chosen:\n    pass\n', {"rfpo"}) == ['"rfpo"']
