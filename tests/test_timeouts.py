"""Timeouts are consistent: a test that may run longer than pytest-timeout's global limit
(pyproject's ``timeout``) declares its own, above every timeout inside it.

The bug this guards against: the demo test gave its subprocess 1200 s while the global
limit killed the test at 600 s, so on a busy machine it failed with a bare pytest-timeout
stack instead of finishing. End-to-end runs (``run_demo``, a subprocess with a timeout at or
over the global one) must carry ``@pytest.mark.timeout(N)`` with N above their inner timeouts.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
END_TO_END_CALLS = {"run_demo"}  # minutes even on a quiet machine


def _global_timeout() -> int:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    return int(options["ini_options"]["timeout"])


def _constants(tree: ast.Module) -> dict[str, int]:
    """Module-level ``NAME = <int>`` assignments, to resolve ``timeout=NAME``."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, int):
                    found[target.id] = node.value.value
    return found


def _value(node: ast.expr, constants: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return int(node.value)
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _inner_timeouts(function: ast.FunctionDef, constants: dict[str, int]) -> list[int]:
    values = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "timeout" and (v := _value(keyword.value, constants)):
                    values.append(v)
    return values


def _calls_end_to_end(function: ast.FunctionDef) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in END_TO_END_CALLS
        for node in ast.walk(function)
    )


def _declared_timeout(function: ast.FunctionDef) -> int | None:
    """N of a ``@pytest.mark.timeout(N)`` decorator, else None."""
    for decorator in function.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "timeout"
            and decorator.args
        ):
            return _value(decorator.args[0], {})
    return None


def test_long_tests_declare_a_timeout_above_their_inner_ones() -> None:
    limit = _global_timeout()
    problems = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        constants = _constants(tree)
        for function in ast.walk(tree):
            if not (isinstance(function, ast.FunctionDef) and function.name.startswith("test_")):
                continue
            inner = _inner_timeouts(function, constants)
            if not (_calls_end_to_end(function) or any(v >= limit for v in inner)):
                continue
            declared = _declared_timeout(function)
            where = f"{path.relative_to(ROOT)}::{function.name}"
            if declared is None:
                problems.append(f"{where}: no @pytest.mark.timeout (global {limit} s)")
            elif declared <= max(inner, default=0) or declared <= limit:
                problems.append(f"{where}: timeout {declared} s ≤ inner {inner} or {limit}")
    assert not problems, "\n".join(problems)
