"""The last ``\\boxed{…}`` of a text: the final answer in MATH-style solutions and in
completions. The datasets reduce reference solutions with it (``data.answer_format =
"math"``) and the math rewards read completions with it, so both agree on one parser."""

from __future__ import annotations

import re


def last_boxed(text: str) -> str | None:
    r"""Contents of the last ``\boxed{…}`` or ``\fbox{…}``, braces balanced; or of a
    brace-less ``\boxed 5``.

    >>> last_boxed(r"so \boxed{1}, then \boxed{\frac{1}{2}}")
    '\\frac{1}{2}'
    >>> last_boxed(r"cut off: \boxed{12") is None
    True
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:].split("{", 1)
    head = rest[0]
    if head not in ("\\boxed", "\\fbox"):
        bare = re.match(r"\\boxed\s+([^\s$]+)", text[start:])
        return bare.group(1) if bare else None
    if len(rest) == 1:
        return None
    begin = start + len(head) + 1
    depth = 0
    for index in range(begin, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            if depth == 0:
                return text[begin:index]
            depth -= 1
    return None  # unbalanced: cut off mid-answer
