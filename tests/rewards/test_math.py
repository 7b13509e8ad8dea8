"""Math answers: extraction and equivalence, table-driven."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from grpo.rewards import extract_answer, is_equivalent, math_equivalence, numeric_answer

EXTRACTION = [
    ("The answer is 46", "46"),
    ("-12", "-12"),
    ("first \\boxed{3}, no wait: \\boxed{5}", "5"),
    ("\\boxed{\\frac{1}{2}} is it", "\\frac{1}{2}"),
    ("\\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),
    ("so \\boxed 7 it is", "7"),
    ("\\fbox{12}", "12"),
    ("Natalia sold 48 clips.\n#### 72", "72"),
    ("#### 1,000\nsome more text", "1,000"),
    ("<think>2+2</think><answer> 4 </answer>", "4"),
    ("The final answer is 3.5. I hope it is correct.", "3.5"),
    ("So the answer is: $\\frac{3}{4}$.", "$\\frac{3}{4}$"),
    ("I computed 3 then 4, finally 5 apples", "5"),
    ("we get x = \\frac{1}{2}", "\\frac{1}{2}"),
    ("a total of 1/3 of the cake", "1/3"),
    ("growth was 50%", "50%"),
    ("it is \u221212 degrees", "-12"),
    ("sequence 1,2,3", "3"),
    ("no digits at all", None),
    ("\\boxed{5", "5"),  # unbalanced box: falls back to the last number
]


@pytest.mark.parametrize(("text", "expected"), EXTRACTION)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


# (completion, answer column, equivalent?)
EQUIVALENCE = [
    # integers, signs, zero
    ("46", "46", True),
    ("-12", "-12", True),
    ("12", "-12", False),
    ("The answer is 46.", "46", True),
    ("\\boxed{-0}", "0", True),
    ("\\boxed{0}", "-0.0", True),
    ("\\boxed{\u22123}", "-3", True),
    ("\\boxed{+7}", "7", True),
    # fractions, decimals, LaTeX fractions: 1/2 = 0.5 = \frac{1}{2}
    ("\\boxed{1/2}", "0.5", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{\\frac{1}{2}}", "1/2", True),
    ("\\boxed{\\dfrac{-3}{4}}", "-0.75", True),
    ("so it is -\\frac{3}{4}", "-0.75", True),
    ("\\boxed{.5}", "1/2", True),
    ("\\boxed{2}", "2.0", True),
    ("\\boxed{2/4}", "\\frac{1}{2}", True),
    ("\\boxed{1/3}", "0.33", False),
    # tolerance for decimals, exactness for integers
    ("\\boxed{0.3333333}", "1/3", True),
    ("\\boxed{1000001}", "1000000", False),
    ("\\boxed{3.1415926}", "3.14159265", True),
    ("\\boxed{1.5 \\times 10^{3}}", "1500", True),
    ("\\boxed{1e3}", "1000", True),
    # thousands separators
    ("#### 1,000", "1000", True),
    ("\\boxed{1,000,000}", "1000000", True),
    ("\\boxed{1{,}000}", "1000", True),
    ("\\boxed{1\\,000}", "1000", True),
    ("\\boxed{1,000}", "1", False),
    # percentages
    ("The answer is 50%", "0.5", True),
    ("The answer is 50\\%", "50", True),
    ("\\boxed{25\\%}", "0.3", False),
    # text and units around the number
    ("It costs $5.00. The answer is $5.", "5", True),
    ("The answer is 12 apples.", "12", True),
    ("\\boxed{7 \\text{ cm}}", "7", True),
    ("\\boxed{x = 5}", "5", True),
    ("\\boxed{2x}", "2", False),
    # several boxed answers: the last counts
    ("\\boxed{3} wait, no: \\boxed{5}", "5", True),
    ("\\boxed{3} wait, no: \\boxed{5}", "3", False),
    # symbolic (math-verify)
    ("\\boxed{\\sqrt{12}}", "2\\sqrt{3}", True),
    ("\\boxed{(x+1)^2}", "x^2+2x+1", True),
    ("\\boxed{\\pi}", "3.14159265", True),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}", True),
    ("\\boxed{\\{2, 1\\}}", "\\{1, 2\\}", True),
    ("\\boxed{x+1}", "x+2", False),
    # no answer, or one that would make sympy run forever
    ("I don't know", "5", False),
    ("\\boxed{9^{9^{9^{9}}}}", "1", False),
]


@pytest.mark.parametrize(("completion", "answer", "expected"), EQUIVALENCE)
def test_math_equivalence(completion: str, answer: str, expected: bool) -> None:
    assert math_equivalence([""], [completion], answer=[answer]) == [float(expected)]


def test_table_is_large_enough() -> None:
    assert len(EQUIVALENCE) >= 40


NUMERIC = [
    ("46", "46", 1.0),
    ("-12", "-12", 1.0),
    ("-12", "12", 0.0),
    ("#### 1,000", "1000", 1.0),
    ("\\boxed{1/2}", "0.5", 1.0),
    ("x", "5", 0.0),
    ("\\boxed{\\sqrt{4}}", "2", 0.0),  # symbolic: not numeric_answer's job
]


@pytest.mark.parametrize(("completion", "answer", "expected"), NUMERIC)
def test_numeric_answer_is_numbers_only(completion: str, answer: str, expected: float) -> None:
    assert numeric_answer([""], [completion], answer=[answer]) == [expected]


def test_numeric_answer_is_fast_and_an_accuracy_reward() -> None:
    completions = ["46", "-12", "The answer is 7", "\\boxed{3}"] * 32
    answers = ["46", "-12", "7", "4"] * 32
    started = time.perf_counter()
    scores = numeric_answer([""] * 128, completions, answer=answers)
    assert time.perf_counter() - started < 1.0  # ~2 ms in practice; generous for shared CPUs
    assert scores == [1.0, 1.0, 1.0, 0.0] * 32
    assert getattr(numeric_answer, "is_accuracy", False)


def test_works_off_the_main_thread() -> None:
    # math-verify's own timeouts use SIGALRM, which fails outside the main thread.
    results: list[list[float]] = []
    completions = ["\\boxed{\\sqrt{12}}", "\\boxed{0.5}"]
    thread = threading.Thread(
        target=lambda: results.append(
            math_equivalence(["", ""], completions, answer=["2\\sqrt{3}", "1/2"])
        )
    )
    thread.start()
    thread.join(30)
    assert results == [[1.0, 1.0]]


def test_falls_back_to_sympy_then_strings_without_math_verify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "math_verify", None)  # import now raises ImportError
    assert is_equivalent("(x+1)^2", "x^2+2x+1")
    assert is_equivalent("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}")
    assert not is_equivalent("x+1", "x+2")
    assert not is_equivalent("__import__('os').getcwd()", "1")  # never handed to eval
    assert is_equivalent("1/2", "0.5")  # numbers need neither
    monkeypatch.setitem(sys.modules, "sympy", None)
    assert is_equivalent("\\left( a, b \\right)", "(a,b)")
    assert not is_equivalent("(x+1)^2", "x^2+2x+1")
