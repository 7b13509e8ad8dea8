"""The package docstring's convention for whose rows a name holds: under ``grpo.training``
and ``grpo.rounds`` a value cut to this process's block (``[dist.rows(...)]`` or
``[local_rows]``) is bound to a ``local_`` name, so the step's rows and this process's rows
never share a name."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "grpo"
CHECKED = (SRC / "training", SRC / "rounds")


def _is_local_block(node: ast.AST) -> bool:
    """``dist.rows(...)`` or the name ``local_rows``: this process's block of the rows."""
    if isinstance(node, ast.Name):
        return node.id == "local_rows"
    return isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "rows"


def _cuts_to_local(value: ast.AST) -> bool:
    return _is_local_block(value) or any(
        isinstance(node, ast.Subscript) and _is_local_block(node.slice) for node in ast.walk(value)
    )


def _misnamed(source: str) -> list[str]:
    wrong = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and _cuts_to_local(node.value):
            for target in node.targets:
                if not (isinstance(target, ast.Name) and target.id.startswith("local_")):
                    wrong.append(f"line {node.lineno}: {ast.unparse(target)}")
    return wrong


def test_the_rule_is_checked_for_real() -> None:
    assert _misnamed("keep_B = keep_B[dist.rows(8)]") == ["line 1: keep_B"]
    assert _misnamed("rows = dist.rows(8)") == ["line 1: rows"]
    assert _misnamed("local_keep_B = keep_B[local_rows].to(device)") == []
    assert _misnamed("x_B = values_B[rows]") == []  # a micro-batch's rows, not a process's


def test_values_cut_to_this_process_have_local_names() -> None:
    wrong = [
        f"{path.relative_to(SRC)} {where}"
        for package in CHECKED
        for path in sorted(package.rglob("*.py"))
        for where in _misnamed(path.read_text())
    ]
    assert not wrong, "name these local_… (src/grpo/__init__.py, 'Whose rows'):\n" + "\n".join(
        wrong
    )
