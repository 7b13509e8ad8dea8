"""Math answers: extract the final answer from a completion, decide if it equals the truth.

Two rewards:

* :func:`numeric_answer`: plain numbers only, regular expressions and exact fractions,
  a few microseconds per row (the demo scores 128 completions a step with it).
* :func:`math_equivalence`: numbers first (the same fast path), then LaTeX and symbolic
  expressions with ``math-verify`` (the ``math`` extra), falling back to a restricted
  ``sympy`` parse when math-verify is missing, and to a normalised string comparison when
  sympy is missing too.

Numbers accepted (both sides): integers and decimals (``-12``, ``0.50``, ``.5``, ``1e3``,
``−3`` with a Unicode minus), thousands separators in groups of three (``1,000,000``;
``1{,}000``; ``1\\,000``), fractions ``a/b`` and ``\\frac{a}{b}`` (``\\dfrac``,
``\\tfrac``, with a sign in front or in the numerator), ``a \\times 10^{k}``, and
percentages (``50%`` or ``50\\%`` equals both 50 and 0.5). Surrounding dollar signs,
``\\(…\\)``, ``\\text{…}``/``\\mathrm{…}`` wrappers, a leading ``x =`` and trailing unit
words (``5 cm``, ``12 apples``) are ignored. ``-0`` equals ``0``. Integers and fractions
compare exactly; when either side is written with a decimal point or an exponent they
compare to a relative tolerance (1e-6 by default), so ``0.3333333`` equals ``1/3`` but
``1000001`` does not equal ``1000000``.
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction
from typing import Any, NamedTuple

from grpo.text.boxed import last_boxed

# One numeric literal: thousands groups only in threes, so "1,2" is not twelve.
_LITERAL = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?"
_SIGNED = rf"[-+]?(?:{_LITERAL})"
_NUMBER = re.compile(_SIGNED)
# Candidates for "the last number" in free text: a LaTeX fraction, a/b, a percentage.
_LAST_CANDIDATE = re.compile(
    rf"-?\\[dt]?frac\{{\s*{_SIGNED}\s*\}}\{{\s*{_SIGNED}\s*\}}|{_SIGNED}(?:\s*/\s*{_LITERAL})?%?"
)
_ANSWER_PHRASE = re.compile(r"answer is[:\s]*([^\n]*)", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class Number(NamedTuple):
    value: Fraction
    inexact: bool  # written with a decimal point or exponent: compare with a tolerance
    percent: bool


# --- extraction ------------------------------------------------------------------------


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, by the first of these forms that is present.

    Order: the last ``\\boxed{…}`` (of several, the last); the rest of the line after the
    last ``####``; the contents of the last ``<answer>…</answer>``; the text after the last
    "answer is" up to the end of that sentence; the last number in the text (a LaTeX
    fraction, ``a/b`` or a percentage counts as one number).
    """
    text = text.replace("\u2212", "-")
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    tagged = _ANSWER_TAG.findall(text)
    if tagged:
        return tagged[-1].strip()
    phrase = _ANSWER_PHRASE.findall(text)
    if phrase:
        sentence = re.split(r"\.(?:\s|$)", phrase[-1], maxsplit=1)[0]  # "3.5" survives
        return sentence.strip().rstrip(".") or None
    candidates = _LAST_CANDIDATE.findall(text)
    return candidates[-1] if candidates else None


# --- numbers ---------------------------------------------------------------------------


def _strip_decoration(text: str, units: bool = True) -> str:
    """Remove what surrounds a number without changing it: math delimiters, LaTeX spacing
    and text wrappers, currency, a leading ``x =``, and (with ``units``) trailing unit
    words: after a space, or of two letters or more, so that ``2x`` stays ``2x``."""
    text = text.strip().replace("\u2212", "-")
    text = re.sub(r"^\\[(\[]|\\[)\]]$", "", text.strip()).strip().strip("$").strip()
    text = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}", r" \1 ", text)
    text = text.replace("{,}", ",").replace("\\!", "").replace("\\%", "%").replace("\\$", "")
    text = re.sub(r"(?<=\d)(?:\\,|\\ |~|\\;)(?=\d{3})", ",", text)  # "1\,000" → "1,000"
    text = re.sub(r"\\[,;: ]|~", " ", text).strip()
    text = re.sub(r"^[A-Za-z]\w*\s*=\s*", "", text)  # "x = 5"
    text = re.sub(r"^(?:USD|\$)\s*", "", text)
    if units:  # "5 cm", "12 apples.", "5cm"
        text = re.sub(r"(?<=[\d%}])(?:\s+[A-Za-z°]|[A-Za-z°]{2})[A-Za-z°\s.]*$", "", text)
    return text.strip().rstrip(".").strip()


def _literal(text: str) -> Number | None:
    if not re.fullmatch(_SIGNED, text):
        return None
    cleaned = text.replace(",", "")
    try:
        value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None
    return Number(value, inexact=bool(re.search(r"[.eE]", cleaned)), percent=False)


def parse_number(text: str) -> Number | None:
    """A number written in one of the forms the module docstring lists, else None."""
    text = _strip_decoration(text)
    if not text or len(text) > 100:
        return None
    percent = text.endswith("%")
    if percent:
        text = text[:-1].strip()
    number = _literal(text)
    if number is None:
        fraction = re.fullmatch(
            rf"(-?)\\[dt]?frac\{{\s*({_SIGNED})\s*\}}\{{\s*({_SIGNED})\s*\}}|({_SIGNED})\s*/\s*({_SIGNED})",
            text,
        )
        power = re.fullmatch(
            rf"({_SIGNED})\s*(?:\\times|\\cdot|×|\*)\s*10\^\{{?\s*(-?\d+)\s*\}}?", text
        )
        if fraction:
            sign, top, bottom, plain_top, plain_bottom = fraction.groups()
            top_number, bottom_number = _literal(top or plain_top), _literal(bottom or plain_bottom)
            if top_number is None or bottom_number is None or bottom_number.value == 0:
                return None
            value = top_number.value / bottom_number.value * (-1 if sign else 1)
            number = Number(value, top_number.inexact or bottom_number.inexact, False)
        elif power and abs(int(power.group(2))) <= 400:
            mantissa = _literal(power.group(1))
            if mantissa is None:
                return None
            number = Number(mantissa.value * Fraction(10) ** int(power.group(2)), True, False)
    if number is None:
        return None
    return number._replace(percent=percent)


def numbers_equal(a: Number, b: Number, rel_tol: float = 1e-6) -> bool:
    """Exact for integers and fractions; relative tolerance when either is a decimal. A
    percentage p% equals both p and p/100."""

    def values(number: Number) -> list[Fraction]:
        return [number.value, number.value / 100] if number.percent else [number.value]

    for x in values(a):
        for y in values(b):
            if x == y:
                return True
            if (a.inexact or b.inexact) and abs(x - y) <= rel_tol * max(abs(x), abs(y)):
                return True
    return False


def answers_match(predicted: str | None, truth: Any) -> bool:
    """Numeric comparison (see :func:`numbers_equal`); exact string match otherwise."""
    if predicted is None:
        return False
    truth_number, predicted_number = parse_number(str(truth)), parse_number(predicted)
    if truth_number is not None and predicted_number is not None:
        return numbers_equal(predicted_number, truth_number)
    return predicted.strip() == str(truth).strip()


def numeric_answer(
    prompts: list[str], completions: list[str], answer: list, **_: object
) -> list[float]:
    """1.0 when the completion's final answer equals the ``answer`` column, else 0.0.

    The answer is read as :func:`extract_answer` says (``\\boxed{}``, ``####``,
    ``<answer>``, "the answer is", else the last number) and compared as numbers
    (:func:`parse_number` lists the accepted forms). No symbolic maths: see
    :func:`math_equivalence` for that.
    """
    return [
        1.0 if answers_match(extract_answer(completion), truth) else 0.0
        for completion, truth in zip(completions, answer, strict=True)
    ]


numeric_answer.is_accuracy = True  # type: ignore[attr-defined]


# --- symbolic --------------------------------------------------------------------------

# Inputs that make sympy work for minutes or forever (9^{9^{9^9}}, 100000!): refused.
_EXPLOSIVE = re.compile(
    r"\^\s*\{[^}]*\^|\^\s*\{?\s*-?\d{5,}|\*\*\s*\(?[^)]*\*\*|\*\*\s*\d{5,}|\d{4,}\s*!"
)
_MAX_SYMBOLIC_CHARS = 300


def _safe_for_symbolic(text: str) -> bool:
    return len(text) <= _MAX_SYMBOLIC_CHARS and not _EXPLOSIVE.search(text)


def _normalise_string(text: str) -> str:
    text = _strip_decoration(text, units=False)
    text = re.sub(r"\\left|\\right|\\!|\\,|\\;|\s+", "", text)
    return text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def _math_verify_equal(predicted: str, truth: str) -> bool | None:
    """math-verify's verdict, or None when math-verify is not installed."""
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    # Its timeouts use SIGALRM, which only the main thread may set; elsewhere the caller's
    # timeout (RewardFunction.timeout_s) is the limit, and _safe_for_symbolic the guard.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(f"\\boxed{{{truth}}}", parsing_timeout=timeout)
    target = parse(f"\\boxed{{{predicted}}}", parsing_timeout=timeout)
    if not gold or not target:
        return False
    return bool(verify(gold, target, timeout_seconds=timeout))


_SYMPY_WORDS = {"sqrt", "pi", "sin", "cos", "tan", "log", "ln", "exp", "E", "I", "oo"}


def _sympy_equal(predicted: str, truth: str) -> bool | None:
    """Plain-expression equality with sympy (``2*x+1`` vs ``1+2x``), or None when sympy is
    missing or an input is not a plain expression. Only digits, operators, parentheses,
    single letters and a few function names get through: sympy's parser ``eval``s."""
    try:
        import sympy
        from sympy.parsing.sympy_parser import (
            convert_xor,
            implicit_multiplication_application,
            parse_expr,
            standard_transformations,
        )
    except ImportError:
        return None
    expressions = []
    for text in (predicted, truth):
        text = _normalise_string(text).replace("\\frac", "").replace("}{", ")/(")
        text = text.replace("{", "(").replace("}", ")").replace("\\", "")
        if not re.fullmatch(r"[\w+\-*/^().= ]+", text) or "__" in text:
            return None
        words = set(re.findall(r"[A-Za-z]{2,}", text))
        if words - _SYMPY_WORDS:
            return None
        try:
            expressions.append(
                parse_expr(
                    text.rsplit("=", 1)[-1],  # "x = 2y" → "2y"
                    transformations=(
                        *standard_transformations,
                        implicit_multiplication_application,
                        convert_xor,
                    ),
                    global_dict={**vars(sympy), "__builtins__": {}},
                )
            )
        except Exception:  # a syntax error, a wrong type: not an expression
            return None
    try:
        return bool(sympy.simplify(expressions[0] - expressions[1]) == 0)
    except Exception:
        return None


def is_equivalent(predicted: str | None, truth: Any, rel_tol: float = 1e-6) -> bool:
    """Numbers by :func:`numbers_equal`; anything else by math-verify, else sympy, else
    the normalised strings."""
    if predicted is None:
        return False
    truth = str(truth)
    predicted_number, truth_number = parse_number(predicted), parse_number(truth)
    if predicted_number is not None and truth_number is not None:
        return numbers_equal(predicted_number, truth_number, rel_tol)
    if _normalise_string(predicted) == _normalise_string(truth):
        return True
    if not (_safe_for_symbolic(predicted) and _safe_for_symbolic(truth)):
        return False
    verdict = _math_verify_equal(predicted, truth)
    if verdict is None:
        verdict = _sympy_equal(predicted, truth)
    return bool(verdict)


def math_equivalence(
    prompts: list[str], completions: list[str], answer: list, *, rel_tol: float = 1e-6, **_: object
) -> list[float]:
    """1.0 when the completion's final answer (:func:`extract_answer`) is mathematically
    equal to the ``answer`` column (:func:`is_equivalent`), else 0.0."""
    return [
        1.0 if is_equivalent(extract_answer(completion), truth, rel_tol) else 0.0
        for completion, truth in zip(completions, answer, strict=True)
    ]


math_equivalence.is_accuracy = True  # type: ignore[attr-defined]
