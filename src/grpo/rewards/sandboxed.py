"""What the sandboxed rewards (code tests, Coq proofs) share: each completion's program,
extracted from its text, is checked in its own sandboxed child process, rows side by side."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

Parsed = TypeVar("Parsed")


def score_sandboxed(
    completions: list[str],
    extract: Callable[[str], str | None],
    check: Callable[[int, str], float],
    workers: int,
) -> list[float]:
    """``check(row, program)`` for each completion's extracted program; 0.0 where nothing
    could be extracted. ``workers`` threads (0: one per core) suffice: each one waits on a
    child process, where the work happens."""

    def score(row: int) -> float:
        program = extract(completions[row])
        return 0.0 if program is None else check(row, program)

    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(score, range(len(completions))))


def parse_rows(values: Sequence[Any], parse: Callable[[Any], Parsed], column: str) -> list[Parsed]:
    """Each row's ``column`` value parsed up front, so a bad row fails before any program
    runs; the ValueError names the row and the column."""
    parsed = []
    for row, value in enumerate(values):
        try:
            parsed.append(parse(value))
        except ValueError as error:
            raise ValueError(f"row {row}: {column}: {error}") from None
    return parsed
