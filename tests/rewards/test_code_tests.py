"""Splitting assert tests into sandbox probes and trusted comparisons, decoding probe values, and
evaluating the comparisons on the trusted side (no sandbox needed)."""

from __future__ import annotations

import ast
import json
import math

import pytest

import rlvr.rewards.code_harness as harness
from rlvr.rewards.code_tests import Missing, ProbeFailed, decode, passes, split_test


@pytest.mark.parametrize(
    ("source", "probes", "templates"),
    [
        ("assert f(1) == 2", ["f(1)"], ["__rlvr_probe__[0] == 2"]),
        (
            "assert abs(f(2) - 0.5) < 1e-9",
            ["f(2)"],
            ["abs(__rlvr_probe__[0] - 0.5) < 1e-09"],
        ),
        (
            "assert [clamp(i, 2, 4) for i in range(6)] == [2, 2, 2, 3, 4, 4]",
            ["[clamp(i, 2, 4) for i in range(6)]"],  # one operand, computed whole in the sandbox
            ["__rlvr_probe__[0] == [2, 2, 2, 3, 4, 4]"],
        ),
        ("assert isinstance(f(1), int)", ["f(1)"], ["isinstance(__rlvr_probe__[0], int)"]),
        (
            "assert sorted([f(2), f(1)]) == [1, 3]",
            ["f(2)", "f(1)"],
            ["sorted([__rlvr_probe__[0], __rlvr_probe__[1]]) == [1, 3]"],
        ),
        (
            "assert Stack().push(1).items[0] == 1 and not g()",
            ["Stack().push(1).items[0]", "g()"],
            ["__rlvr_probe__[0] == 1 and (not __rlvr_probe__[1])"],
        ),
        (
            "assert f(1)\nassert f(2) is None",
            ["f(1)", "f(2)"],
            ["__rlvr_probe__[0]", "__rlvr_probe__[1] is None"],
        ),
        (
            "import math\nassert math.isclose(f(1), 2.0)",
            ["f(1)"],
            ["math.isclose(__rlvr_probe__[0], 2.0)"],
        ),
        (
            "from math import isclose as close\nassert close(f(1), 2.0, rel_tol=1e-6)",
            ["f(1)"],
            ["math.isclose(__rlvr_probe__[0], 2.0, rel_tol=1e-06)"],
        ),
        (  # HumanEval's form: the check function's asserts, with the candidate's real name
            'def check(candidate):\n    """doc"""\n    assert candidate(1) == 2\n\ncheck(inc)',
            ["inc(1)"],
            ["__rlvr_probe__[0] == 2"],
        ),
    ],
)
def test_split_keeps_expected_values_out_of_the_probes(source, probes, templates):
    split = split_test(source)
    assert list(split.probes) == probes
    assert [ast.unparse(t) for t in split.asserts] == templates


@pytest.mark.parametrize(
    "source",
    [
        "x = f(1)\nassert x == 2",  # setup: `expected = 2` would sit in the solution's globals
        "assert all(f(i) == i for i in range(3))",  # the comparison would run in the sandbox
        "import numpy as np\nassert np.allclose(f(1), [1.0])",  # code the trusted side lacks
        "assert sorted(f(1), key=lambda x: -x) == [2, 1]",
        "def helper():\n    return 2\nassert f(1) == helper()",
        "for i in range(3):\n    assert f(i) == i",
        "assert max(*f(1)) == 1",
        "pass",
    ],
)
def test_what_cannot_be_split_goes_the_weak_path(source):
    assert split_test(source) is None


def test_a_call_around_the_expected_value_is_one_probe_with_no_comparison_in_it():
    # check(f(1), 2) is the solution's own function: its truth is the test, as written.
    split = split_test("assert check(f(1), 2)")
    assert split.probes == ("check(f(1), 2)",)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        -(10**30),
        1.5,
        float("inf"),
        2j,
        "naïve\n",
        b"\x00\xff",
        [1, (2, 3), {4}, frozenset({5})],
        {"a": [None], 2: (b"x",)},
        (),
    ],
)
def test_decode_reads_what_the_harness_encodes(value):
    assert decode(harness.value_encoder()(value)) == value


def test_nan_travels():
    assert math.isnan(decode(harness.value_encoder()(float("nan"))))


class Sneaky:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class LoudInt(int):
    pass


@pytest.mark.parametrize(
    "value", [Sneaky(), LoudInt(3), [Sneaky()], {1: Sneaky()}, bytearray(b"x")]
)
def test_the_harness_encodes_only_plain_values(value):
    with pytest.raises(TypeError):
        harness.value_encoder()(value)


@pytest.mark.parametrize(
    "text",
    [
        '["object", 1]',
        '["int", "1"]',  # a str where an int must be
        '["bool", 1]',
        '["float", "1.5 + __import__(\'os\')"]',
        '["dict", [[["list", []], ["int", 1]]]]',  # an unhashable key
        '["list", 1]',
        "[]",
        '{"int": 1}',
        "not json",
        json.dumps(["str", "x" * (1 << 21)]),  # too large
        "[" * 100 + '"list", [' * 1 + "]" * 100,
    ],
)
def test_decode_refuses_anything_else(text):
    with pytest.raises(ProbeFailed):
        decode(text)


def test_decode_refuses_deep_nesting():
    deep = ["int", 1]
    for _ in range(100):
        deep = ["list", [deep]]
    with pytest.raises(ProbeFailed):
        decode(json.dumps(deep))


@pytest.mark.parametrize(
    ("source", "values", "expected"),
    [
        ("assert f(1) == 2", [2], True),
        ("assert f(1) == 2", [3], False),
        ("assert f(1) == 2", [2.0], True),
        ("assert abs(f(2) - 0.5) < 1e-9", [0.5], True),
        ("assert abs(f(2) - 0.5) < 1e-9", [0.6], False),
        ("assert abs(f(2) - 0.5) < 1e-9", ["x"], False),  # a TypeError fails the test
        ("assert f(1) == 2 and f(2) == 3", [2, 3], True),
        ("assert f(1) == 2 or f(2) == 3", [2, Missing("raised")], True),  # short-circuits
        ("assert f(1) == 2 and f(2) == 3", [2, Missing("raised")], False),
        ("assert f(1) < f(2) <= 5", [1, 5], True),
        ("assert f(1) < f(2) <= 5", [1, 6], False),
        ("assert f(1) in (1, 2)", [2], True),
        ("assert f(1) not in [1, 2]", [2], False),
        ("assert f(1) is None", [None], True),
        ("assert not f(1)", [[]], True),
        ("assert f(1)", [[]], False),
        ("assert isinstance(f(1), (int, float))", [True], True),
        ("assert type(f(1)) == int", [True], False),
        ("assert sorted(f(1)) == [1, 2, 3]", [{3, 1, 2}], True),
        ("assert len(f(1)) == 2", [{"a": 1, "b": 2}], True),
        ("assert f(1)[0] == 'a'", ["a"], True),  # the probe is f(1)[0]: this value is it
        ("assert round(f(1), 2) == 0.33", [1 / 3], True),
        ("import math\nassert math.isclose(f(1), math.pi)", [3.141592653589793], True),
        ("assert f(1) == list(range(3))", [[0, 1, 2]], True),
        ("assert 2 ** f(1) == 8", [3], True),
        ("assert 2 ** f(1) > 0", [10**9], False),  # refused, not computed
        ("assert f(1) * 'x' == ''", [10**12], False),
        ("assert range(f(1))", [10**12], False),
        ("assert round(f(1), -(10**9)) == 0", [5], False),
        ("assert f(1) / 0", [1], False),
        ("assert f(1) == f(1)", [float("nan"), float("nan")], False),
    ],
)
def test_passes_evaluates_on_plain_values(source, values, expected):
    assert passes(split_test(source), values) is expected
