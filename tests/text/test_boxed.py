"""The last ``\\boxed{…}`` of a text, as the datasets and the math rewards both read it."""

from __future__ import annotations

import doctest

import pytest

import grpo.text.boxed
from grpo.text.boxed import last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("first \\boxed{3}, no wait: \\boxed{5}", "5"),  # the last one
        ("\\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),  # escaped braces balance too
        ("\\fbox{x + 1}", "x + 1"),
        ("so \\boxed 7 it is", "7"),  # brace-less
        ("\\boxed{5", None),  # cut off mid-answer
        ("\\boxed", None),
        ("no box at all", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


def test_docstring_examples() -> None:
    assert doctest.testmod(grpo.text.boxed).failed == 0
