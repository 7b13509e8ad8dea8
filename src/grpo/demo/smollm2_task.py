"""The real-model demo's task: arithmetic facts that SmolLM2-135M-Instruct knows but does not
say.

Asked "What is 7 times 4?", the base model mostly talks around the question ("To find 7
times 4, we can use the formula for multiplication of a number by itself…") and runs out
of tokens, yet given the start of an answer ("7 times 4 is") it completes the right number
for most times-table facts. That gap is where GRPO has signal: some of the G samples
answer and most do not, and the reward picks the ones that do. Four kinds of question, as
they measured on the base model (``python benchmarks/smollm2_kinds.py``: greedy, in the chat
template, 30 questions each; the first column answers the bare question, the second
completes the prefilled start of the answer):

=============================  ==============  ================
kind                           bare question   answer prefilled
=============================  ==============  ================
multiply (tables to 12)        40%             70%
divide (exact)                 40%             53%
next number                    0%              77%
multiply 2-digit by 1-digit    13%             30%
=============================  ==============  ================

Addition and subtraction were left out: prefilled, the model gets 0% of 2-digit sums and
17% of differences right, so there is little to bring out. The splits are disjoint by fact,
not only by question: "7 times 4", "4 times 7", "28 divided by 4" and "28 divided by 7" are
one fact and sit in one split, so no test question is a rewording of a trained one.
"""

from __future__ import annotations

import random

KINDS = ("multiply", "divide", "next number", "multiply 2-digit by 1-digit")
TABLES = range(2, 13)  # times tables 2…12: the facts of "multiply" and "divide"
TEST_PER_KIND, DEV_PER_KIND = 50, 25
NEXT_NUMBER_TRAIN = MULTIPLY_21_TRAIN = 100  # the times tables leave about 48 of each


def _row(prompt: str, answer: int, kind: str) -> dict[str, str]:
    return {"prompt": prompt, "answer": str(answer), "kind": kind}


def _table_questions(facts: list[tuple[int, int]], kind: str) -> list[dict[str, str]]:
    """Every question of ``kind`` on these facts {a, b}: both products, or both quotients."""
    rows = []
    for a, b in facts:
        for x, y in sorted({(a, b), (b, a)}):
            if kind == "multiply":
                rows.append(_row(f"What is {x} times {y}?", x * y, kind))
            else:
                rows.append(_row(f"What is {x * y} divided by {x}?", y, kind))
    return rows


def _share_facts(facts: list[tuple[int, int]]) -> dict[str, list[tuple[int, int]]]:
    """The facts in order to test until it has :data:`TEST_PER_KIND` products, then to dev
    until :data:`DEV_PER_KIND`, the rest to train."""
    shares: dict[str, list[tuple[int, int]]] = {"test": [], "dev": [], "train": []}
    wanted = {"test": TEST_PER_KIND, "dev": DEV_PER_KIND}
    for fact in facts:
        split = next(
            (s for s, n in wanted.items() if len(_table_questions(shares[s], "multiply")) < n),
            "train",
        )
        shares[split].append(fact)
    return shares


def make_smollm2_splits(
    seed: int = 0,
) -> tuple[list[dict[str, str]], list[dict[str, str]], list[dict[str, str]]]:
    """Train, dev and test rows ``{"prompt", "answer", "kind"}``; no fact in two splits.

    The test and dev splits hold :data:`TEST_PER_KIND` and :data:`DEV_PER_KIND` questions of
    each kind; the times-table facts are shared out first to test, then to dev, the rest to
    train; the other two kinds draw fresh numbers for each split.
    """
    rng = random.Random(seed)
    facts = [(a, b) for a in TABLES for b in TABLES if a <= b]
    rng.shuffle(facts)
    sizes = {"test": TEST_PER_KIND, "dev": DEV_PER_KIND, "train": None}
    splits: dict[str, list[dict[str, str]]] = {}
    for split, split_facts in _share_facts(facts).items():
        rows = []
        for kind in ("multiply", "divide"):
            rows += _table_questions(split_facts, kind)[: sizes[split]]
        splits[split] = rows
    numbers = rng.sample(range(10, 999), TEST_PER_KIND + DEV_PER_KIND + NEXT_NUMBER_TRAIN)
    next_rows = [_row(f"What number comes after {n}?", n + 1, "next number") for n in numbers]
    pairs = [(a, b) for a in range(13, 50) for b in range(2, 10)]
    wide_rows = [
        _row(f"What is {a} times {b}?", a * b, "multiply 2-digit by 1-digit")
        for a, b in rng.sample(pairs, TEST_PER_KIND + DEV_PER_KIND + MULTIPLY_21_TRAIN)
    ]
    start = 0
    for split, size in (("test", TEST_PER_KIND), ("dev", DEV_PER_KIND), ("train", None)):
        end = None if size is None else start + size
        splits[split] += next_rows[start:end] + wide_rows[start:end]
        rng.shuffle(splits[split])
        start = end or 0
    return splits["train"], splits["dev"], splits["test"]
