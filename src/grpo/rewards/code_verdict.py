"""The host's side of an assert-style code test: the probes' values, reported by the
harness as typed JSON, rebuilt as fresh plain Python objects (:func:`decode`), and the
test's verdict evaluated on them in the trainer's process (:func:`verdict`), with only a
few pure builtins and ``math`` in scope and type-strict ``==``, ``!=``, ``in`` and ``not
in`` (:func:`strict_equal`). How a test is split into probes and a verdict:
:mod:`grpo.rewards.code_checks`.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from grpo.rewards.code_checks import PROBE_PREFIX, PURE_BUILTINS, TestPlan


def decode(encoded: Any) -> Any:
    """The harness's typed JSON → fresh plain Python objects; ValueError for anything else."""
    if encoded is None or isinstance(encoded, bool):
        return encoded
    if not isinstance(encoded, dict) or len(encoded) != 1:
        raise ValueError(f"not an encoded value: {str(encoded)[:80]}")
    [(tag, payload)] = encoded.items()
    if tag == "s" and isinstance(payload, str):
        return payload
    scalars = {
        "i": int,
        "f": float.fromhex,
        "b": bytes.fromhex,
        "c": lambda parts: complex(float.fromhex(parts[0]), float.fromhex(parts[1])),
    }
    if tag in scalars and isinstance(payload, (str, list)):
        return scalars[tag](payload)
    if not isinstance(payload, list):
        raise ValueError(f"not an encoded value: {str(encoded)[:80]}")
    containers = {"l": list, "t": tuple, "S": set, "F": frozenset}
    if tag in containers:
        return containers[tag](decode(item) for item in payload)
    if tag == "d":
        return {decode(key): decode(value) for key, value in payload}
    raise ValueError(f"unknown tag {tag!r}")


def _typed(value: Any) -> Any:
    """A hashable form of plain data that keeps every level's exact type."""
    kind = type(value)
    if kind in (list, tuple):
        return (kind.__name__, tuple(_typed(v) for v in value))
    if kind in (set, frozenset):
        return (kind.__name__, frozenset(_typed(v) for v in value))
    if kind is dict:
        return ("dict", frozenset((_typed(k), _typed(v)) for k, v in value.items()))
    if kind in (int, float, complex, str, bytes, bool, type(None)):
        return (kind.__name__, value)
    return ("object", id(value))  # verdict-made objects (ranges, iterators): identity only


def strict_equal(a: Any, b: Any) -> bool:
    """Equal with exactly the same types at every level: ``1 != 1.0 != True``,
    ``[1] != (1,)``; objects other than plain data are equal only to themselves."""
    if type(a) is not type(b):
        return False
    try:
        return _typed(a) == _typed(b)
    except TypeError:  # unhashable in a set/dict position: cannot come from decode
        return False


def strict_contains(container: Any, item: Any) -> bool:
    if type(container) in (str, bytes):
        return type(item) is type(container) and item in container
    return any(strict_equal(item, element) for element in container)


_SCOPE = {name: getattr(builtins, name) for name in PURE_BUILTINS}
# The calls plan_test's rewriting puts in a verdict in place of ==, !=, in and not in.
_HELPERS = {
    "_grpo_eq": strict_equal,
    "_grpo_ne": lambda a, b: not strict_equal(a, b),
    "_grpo_in": lambda a, b: strict_contains(b, a),
    "_grpo_not_in": lambda a, b: not strict_contains(b, a),
}


def verdict(plan: TestPlan, encoded_probes: list[Any]) -> bool:
    """Whether the test passed, given the harness's report of its probes."""
    assert plan.verdict is not None
    if len(encoded_probes) != len(plan.probes):
        return False
    scope: dict[str, Any] = {"__builtins__": _SCOPE, "math": math, **_HELPERS}
    try:
        for index, report in enumerate(encoded_probes):
            if not isinstance(report, dict) or "v" not in report:
                return False  # the probe raised, or returned something that is not data
            scope[f"{PROBE_PREFIX}{index}"] = decode(report["v"])
        return bool(eval(compile(plan.verdict, "<test verdict>", "eval"), scope))
    except Exception:
        return False
