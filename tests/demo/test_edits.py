"""The string-edit task family: edits, splits with a level column, the exact reward."""

from __future__ import annotations

from grpo.demo.edits import apply_edits, exact_edit, make_edit_splits
from grpo.demo.tokenizer import ALPHABET


def test_edits_by_hand() -> None:
    assert apply_edits("cabd", "R") == "dbac"
    assert apply_edits("cabd", "RL") == "bacd"  # reverse, then rotate left
    assert apply_edits("cabd", "S") == "abcd"
    assert apply_edits("cabd", "DF") == "aabd"  # drop c, double a
    assert apply_edits("cab", "") == "cab"


def test_splits_are_disjoint_with_a_level_column_and_the_demo_alphabet() -> None:
    train, test = make_edit_splits(300, 100, seed=1)
    assert len(train) == 300 and len(test) == 100
    assert not {row["prompt"] for row in train} & {row["prompt"] for row in test}
    for row in train + test:
        word, program = row["prompt"].rstrip("=").split(":")
        assert row["level"] == len(program) and row["level"] in (1, 2, 3)
        assert row["answer"] == apply_edits(word, program)
        assert set(row["prompt"] + row["answer"]) <= set(ALPHABET)
    assert make_edit_splits(300, 100, seed=1) == (train, test)  # reproducible


def test_exact_reward() -> None:
    assert exact_edit(["x"] * 3, ["abc", " abc ", "abd"], ["abc"] * 3) == [1.0, 1.0, 0.0]
