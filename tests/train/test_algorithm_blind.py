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
    # the wiring (components.py) builds the chosen methods from their settings; nothing else does
    readers = [p.name for p in LOOP if p.name != "components.py" and "cfg.methods" in p.read_text()]
    assert not readers, f"the loop reads methods' settings: {readers}"


def test_the_check_catches_a_named_method():
    assert named_algorithms("from rlvr.methods.rfpo import RFPO\n", {"RFPO", "rfpo"}) == ["RFPO"]
    assert named_algorithms('if "rfpo" in chosen:\n    pass\n', {"rfpo"}) == ['"rfpo"']


def test_the_loop_names_no_runner():
    from rlvr.methods.runners import RUNNERS

    names = {*RUNNERS, *(cls.__name__ for cls in RUNNERS.values())}
    # the warm start still writes a debate critic's demonstrations in its layout
    loop = [path for path in LOOP if path.name != "warmstart.py"]
    offenders = {p.name: hits for p in loop if (hits := named_algorithms(p.read_text(), names))}
    assert not offenders, f"the loop names runners: {offenders}"


def shared_record_fields() -> dict[str, list[str]]:
    from dataclasses import fields

    from rlvr.algos.advantages import AdvInputs
    from rlvr.rollout.engine import Completion
    from rlvr.train.update import UpdateInputs
    from rlvr.types import Batch, Trajectory

    records = (Trajectory, Completion, Batch, AdvInputs, UpdateInputs)
    return {record.__name__: [f.name for f in fields(record)] for record in records}


def test_shared_records_carry_no_field_of_one_method_alone():
    """Every field of a record the loop passes around is read outside rlvr/methods/ (by the loop
    or a registered part), or by at least two methods."""
    methods = sorted((RLVR / "methods").glob("*.py"))
    elsewhere = [p for p in RLVR.rglob("*.py") if "methods" not in p.parts and p.name != "types.py"]
    texts = {p: p.read_text() for p in [*methods, *elsewhere]}
    lonely = []
    for record, names in shared_record_fields().items():
        for name in names:
            uses = (f".{name}", f"{name}=", f'"{name}"')  # an attribute, a keyword, by name
            readers = [p for p in texts if any(use in texts[p] for use in uses)]
            by_methods = [p for p in readers if p in methods]
            if len(by_methods) == len(readers) and len(by_methods) < 2:
                lonely.append(f"{record}.{name}")
    assert not lonely, f"fields only one method uses: {lonely}"
