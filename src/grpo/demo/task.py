"""The embedded verifiable task: integer arithmetic of mixed difficulty, with a held-out split.

A prompt is ``"47+38="``; the completion is the number and EOS. Difficulties: one-digit
addition, two-digit addition (carries), two-digit subtraction (negative results too),
one-digit by one-digit multiplication.
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def _problem(rng: random.Random) -> tuple[str, int]:
    kind = rng.choice(["add1", "add2", "sub2", "mul1"])
    if kind == "add1":
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return f"{a}+{b}=", a + b
    if kind == "add2":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"{a}+{b}=", a + b
    if kind == "sub2":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"{a}-{b}=", a - b
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"{a}*{b}=", a * b


def make_splits(train_size: int, test_size: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Disjoint train and held-out rows ``{"prompt": ..., "answer": ...}``."""
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    while len(seen) < train_size + test_size:
        prompt, answer = _problem(rng)
        seen.setdefault(prompt, answer)
    items = list(seen.items())
    rng.shuffle(items)
    rows = [{"prompt": p, "answer": str(a)} for p, a in items]
    return rows[:train_size], rows[train_size:]


def write_jsonl(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_splits(
    work_dir: Path, train_rows: list[dict], dev_rows: list[dict], test_rows: list[dict]
) -> tuple[Path, Path, Path]:
    """The three splits as ``train.jsonl``, ``dev.jsonl`` and ``test.jsonl`` in ``work_dir``;
    their paths."""
    return (
        write_jsonl(train_rows, work_dir / "train.jsonl"),
        write_jsonl(dev_rows, work_dir / "dev.jsonl"),
        write_jsonl(test_rows, work_dir / "test.jsonl"),
    )
