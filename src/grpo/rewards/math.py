"""Numeric-answer correctness: extract the final answer from a completion, compare to truth."""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+"


def _last_boxed(text: str) -> str | None:
    """Contents of the last \\boxed{...}, braces balanced."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for index in range(begin, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            if depth == 0:
                return text[begin:index]
            depth -= 1
    return None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, by the first form that is present.

    Order: the last ``\\boxed{…}``; the text after the last ``####``; the contents of the
    last ``<answer>…</answer>``; the text after the last "the answer is"; the last number.
    """
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    tagged = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
    if tagged:
        return tagged[-1].strip()
    phrase = re.findall(r"the answer is[:\s]*([^\n]*)", text, flags=re.IGNORECASE)
    if phrase:
        return phrase[-1].strip().rstrip(".")
    numbers = re.findall(_NUMBER, text)
    return numbers[-1] if numbers else None


def parse_number(text: str) -> Fraction | None:
    """A number from answer text: integers, decimals, a/b fractions, thousands separators."""
    cleaned = text.strip().strip("$").replace(",", "").rstrip(".")
    fraction = re.fullmatch(r"(-?\d+)\s*/\s*(\d+)", cleaned)
    if fraction:
        denominator = int(fraction.group(2))
        return Fraction(int(fraction.group(1)), denominator) if denominator else None
    match = re.search(_NUMBER, cleaned)
    if not match:
        return None
    try:
        return Fraction(match.group(0).replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted: str | None, truth: str | float | int) -> bool:
    if predicted is None:
        return False
    truth_value = parse_number(str(truth))
    predicted_value = parse_number(predicted)
    if truth_value is not None and predicted_value is not None:
        return predicted_value == truth_value
    return predicted.strip() == str(truth).strip()


def numeric_answer(prompts: list[str], completions: list[str], answer: list, **_: object) -> list[float]:
    """1.0 when the completion's final answer equals the ``answer`` column, else 0.0.

    The answer is read as :func:`extract_answer` says (``\\boxed{}``, ``####``,
    ``<answer>``, "the answer is", else the last number) and compared numerically.
    """
    return [
        1.0 if answers_match(extract_answer(completion), truth) else 0.0
        for completion, truth in zip(completions, answer, strict=True)
    ]


numeric_answer.is_accuracy = True  # type: ignore[attr-defined]
