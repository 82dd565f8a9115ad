import pytest

from rlvr.rewards.answers import extract_answer, marked_answer, reference_answer, strip_units


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{5}", "5"),
        (r"first \boxed{1} then \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{\{1, 2\} \cup {3}}", r"\{1, 2\} \cup {3}"),
        (r"\boxed{7} and a truncated \boxed{\frac{1", "7"),
        (r"#### 12 but \boxed{3}", "3"),  # boxed outranks ####
        ("7+5+0=12 4+8+1=13 #### 632", "632"),
        ("#### 1\nmore work\n#### -2,500 dollars\nthanks", "-2,500 dollars"),
        ("#### \n42", None),  # an empty #### line is no answer, and a bare number is none either
        ("<answer>x</answer> then <answer> 3/4 </answer>", "3/4"),
        ("#### 9\n<answer>8</answer>", "9"),  # #### outranks <answer>
        ("#### 9 <answer>8</answer>", "9 <answer>8</answer>"),  # the rest of the line
        ("it is 12, or maybe -3.5 in the end", None),  # no marker, no answer
        ("\u2026756\ufffd96\ufffd 853\ufffd", None),  # a random model's digits are no answer
        ("", None),
    ],
)
def test_extract_answer_goldens(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("#### \n42", "42"),
        ("it is 12, or maybe -3.5 in the end", "-3.5"),
        ("total 1,234,567 apples", "1,234,567"),
        ("so 8-3", "3"),
        ("(2)-3", "3"),
        ("so 8 -3", "-3"),
        ("\u2026756\ufffd96\ufffd 853\ufffd", "853"),
        ("#### 7 and later 9", "7 and later 9"),  # a marker still wins over the fallback
        ("no digits here", None),
    ],
)
def test_last_number_fallback_only_when_asked(text, expected):
    assert extract_answer(text, fallback="last_number") == expected


@pytest.mark.parametrize(
    "reference, expected",
    [
        ("22+11=33 #### 33", "33"),
        ("Half of it: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("Paris", "Paris"),
        ("-2.5", "-2.5"),
    ],
)
def test_reference_given_as_a_worked_solution_is_its_marked_answer(reference, expected):
    assert reference_answer(reference) == expected


def test_marked_answer_reports_where_the_marker_ends():
    text = r"work \boxed{42} done"
    answer, end = marked_answer(text)
    assert answer == "42" and text[end:] == " done"
    assert marked_answer("just 42") is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12 dollars", "12"),
        ("5 cm", "5"),
        ("1,234 apples.", "1,234"),
        ("$2.50 per pound", "$2.50"),
        ("3 pi", "3 pi"),  # mathematics, not a unit
        ("x + 1", "x + 1"),
        ("12", "12"),
        ("2 x", "2 x"),  # one letter: a variable, not a unit
    ],
)
def test_strip_units_keeps_the_number_of_a_quantity(text, expected):
    assert strip_units(text) == expected
