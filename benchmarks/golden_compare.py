"""The comparisons of ``golden_run.py``: two run directories, tensor by tensor and line by
line, exact (weights bitwise, JSON values by their exact text)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class SetupError(RuntimeError):
    """The check itself cannot run (exit 2)."""


class NewCodeError(RuntimeError):
    """The new code failed where the commit's code did not (a FAIL, exit 1)."""


def is_timing(key: str) -> bool:
    """Timings, and the asynchronous pipeline's own measurements (``async/*``: lag, queue,
    idle and sync seconds; a synchronous run has none), are not compared."""
    return key.startswith(("time/", "async/")) or key.endswith("/seconds")


def canonical(value: Any) -> str:
    """Exact text of a JSON value: floats by repr (NaN == NaN, -0.0 ≠ 0.0, 1 ≠ 1.0)."""
    return json.dumps(value, sort_keys=True)


def read_jsonl(path: Path) -> list[dict[str, Any]] | None:
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_weights(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    files = sorted((run_dir / "final").glob("*.safetensors"))
    if not files:
        raise NewCodeError(f"no final/*.safetensors in {run_dir}")
    tensors: dict[str, Any] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    return tensors


def compare_weights(base_dir: Path, new_dir: Path) -> tuple[str, list[str]]:
    """(summary, differences) of the two final models, tensor by tensor, bitwise."""
    import torch

    base, new = load_weights(base_dir), load_weights(new_dir)
    problems = [f"  only in the base model: {key}" for key in sorted(set(base) - set(new))]
    problems += [f"  only in the new model: {key}" for key in sorted(set(new) - set(base))]
    for key in sorted(set(base) & set(new)):
        a, b = base[key], new[key]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(
                f"  {key}: base {a.dtype} {tuple(a.shape)} vs new {b.dtype} {tuple(b.shape)}"
            )
        elif not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)):
            differ = int((a != b).sum()) if a.numel() else 0
            delta = (a.double() - b.double()).abs().max().item() if a.is_floating_point() else 0
            problems.append(
                f"  {key}: {differ} of {a.numel()} elements differ, max |Δ| = {delta:.3g}"
            )
    parameters = sum(t.numel() for t in base.values())
    summary = f"{len(base)} tensors ({parameters:,} values)"
    return summary, problems


@dataclass
class Difference:
    """One key whose value differs between the base and the new run's row ``index``."""

    index: int  # 1-based row (line) number
    step: Any  # the row's "step", when it has one
    base: str  # canonical JSON, "(absent)" when the row lacks the key
    new: str


def added_keys(base: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """Keys the new run logs and the base run never did: metrics the change adds, which
    have nothing to be compared with (they are listed; a key the base run had is always
    compared, so a renamed or dropped one still differs)."""
    return sorted({k for row in new for k in row} - {k for row in base for k in row})


def key_differences(
    base: list[dict[str, Any]], new: list[dict[str, Any]]
) -> dict[str, list[Difference]]:
    """Key → the rows where its value differs, exactly (timing keys and the keys the new
    code adds aside)."""
    by_key: dict[str, list[Difference]] = {}
    added = set(added_keys(base, new))
    for index, (a, b) in enumerate(zip(base, new, strict=False), start=1):
        for key in sorted(set(a) | set(b)):
            if is_timing(key) or key in added:
                continue
            left = canonical(a[key]) if key in a else "(absent)"
            right = canonical(b[key]) if key in b else "(absent)"
            if left != right:
                difference = Difference(index, a.get("step"), left, right)
                by_key.setdefault(key, []).append(difference)
    return by_key


def compare_metrics(base_dir: Path, new_dir: Path) -> tuple[str, list[str]]:
    """(summary, differences) of metrics.jsonl: each differing key with every step it differs
    on and both values."""
    base, new = read_jsonl(base_dir / "metrics.jsonl"), read_jsonl(new_dir / "metrics.jsonl")
    if base is None:
        raise SetupError(f"the base run wrote no metrics.jsonl in {base_dir}")
    if new is None:
        raise NewCodeError(f"the new run wrote no metrics.jsonl in {new_dir}")
    problems: list[str] = []
    if len(base) != len(new):
        problems.append(f"  {len(base)} lines in the base run, {len(new)} in the new one")
    for key, where in sorted(key_differences(base, new).items()):
        problems.append(f"  {key}: differs on {len(where)} step(s)")
        problems.extend(f"      step {d.step}: base {d.base}, new {d.new}" for d in where)
    keys = {k for row in base for k in row if not is_timing(k)}
    timing = sorted({k for row in base + new for k in row if is_timing(k)})
    summary = f"{len(base)} lines × {len(keys)} keys; timings ignored: {', '.join(timing)}"
    if added := [k for k in added_keys(base, new) if not is_timing(k)]:
        summary += f"; added by the new code (not in the base run): {', '.join(added)}"
    return summary, problems


def compare_rows(base_dir: Path, new_dir: Path, name: str) -> tuple[str, list[str]]:
    """(summary, differences) of a JSONL file of rows, compared exactly row by row: each
    differing column with the rows (and steps) it differs on and its first difference."""
    base, new = read_jsonl(base_dir / name), read_jsonl(new_dir / name)
    if base is None and new is None:
        return "written by neither run", []
    if base is None or new is None:
        return "", [f"  written by the {'new' if base is None else 'base'} run only"]
    problems = []
    if len(base) != len(new):
        problems.append(f"  {len(base)} rows in the base run, {len(new)} in the new one")
    for key, where in sorted(key_differences(base, new).items()):
        steps = sorted({d.step for d in where if d.step is not None})
        on_steps = f" (steps {', '.join(map(str, steps))})" if steps else ""
        problems.append(f"  {key}: differs on {len(where)} of {len(base)} rows{on_steps}")
        first = f"row {where[0].index}: base {where[0].base}, new {where[0].new}"
        problems.append(f"      first: {first if len(first) <= 160 else first[:157] + '...'}")
    added = added_keys(base, new)
    return f"{len(base)} rows" + (f"; added columns: {', '.join(added)}" if added else ""), problems


def compare(base_dir: Path, new_dir: Path) -> list[str]:
    """Print every comparison; return the titles of those that differ."""
    checks = [
        ("final weights (bitwise)", compare_weights),
        ("metrics.jsonl (exact)", compare_metrics),
        ("completions.jsonl (extra)", lambda a, b: compare_rows(a, b, "completions.jsonl")),
        ("prompt_stats.jsonl (extra)", lambda a, b: compare_rows(a, b, "prompt_stats.jsonl")),
    ]
    different = []
    for title, check in checks:
        summary, problems = check(base_dir, new_dir)
        if problems:
            different.append(title.split(" (")[0])
            print(f"DIFFERENT  {title}, {summary}:" if summary else f"DIFFERENT  {title}:")
            for problem in problems:
                print(problem)
        else:
            print(f"equal      {title}: {summary}")
    return different
