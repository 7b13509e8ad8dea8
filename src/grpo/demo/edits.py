"""A second embedded task family: multi-step string edits, with a ``level`` column.

A prompt is a short lowercase word and a program of edits, ``"cabd:RL="``; the completion
is the edited word and EOS (here ``"dbac"`` reversed, then rotated left: ``"bacd"``). The
difficulty is the program's length (``level`` 1, 2 or 3 edits), not the size of numbers
as in the arithmetic task: a deeper composition of the same few operations.

Edits: ``R`` reverse, ``S`` sort the letters, ``L`` rotate left by one, ``D`` drop the
first letter, ``F`` double the first letter.
"""

from __future__ import annotations

import random

LETTERS = "abcdefgh"
EDITS = {
    "R": lambda word: word[::-1],
    "S": lambda word: "".join(sorted(word)),
    "L": lambda word: word[1:] + word[:1],
    "D": lambda word: word[1:],
    "F": lambda word: word[:1] + word,
}


def apply_edits(word: str, program: str) -> str:
    """The word after each edit of ``program`` in order.

    Example: ``apply_edits("cabd", "RL")`` → reverse "dbac" → rotate "bacd".
    """
    for edit in program:
        word = EDITS[edit](word)
    return word


def _problem(rng: random.Random) -> dict:
    level = rng.choice([1, 2, 3])
    word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 5)))
    program = "".join(rng.choice(list(EDITS)) for _ in range(level))
    return {"prompt": f"{word}:{program}=", "answer": apply_edits(word, program), "level": level}


def make_edit_splits(
    train_size: int, test_size: int, seed: int = 0
) -> tuple[list[dict], list[dict]]:
    """Disjoint train and held-out rows ``{"prompt", "answer", "level"}``."""
    rng = random.Random(seed)
    seen: dict[str, dict] = {}
    while len(seen) < train_size + test_size:
        row = _problem(rng)
        seen.setdefault(row["prompt"], row)
    rows = list(seen.values())
    rng.shuffle(rows)
    return rows[:train_size], rows[train_size:]


def exact_edit(
    prompts: list[str], completions: list[str], answer: list, **_: object
) -> list[float]:
    """1.0 when the completion, stripped of surrounding spaces, is the edited word."""
    return [
        1.0 if completion.strip() == str(truth) else 0.0
        for completion, truth in zip(completions, answer, strict=True)
    ]
