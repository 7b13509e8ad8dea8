"""The real-model demo's task: answers right, kinds as stated, splits disjoint by fact."""

import re
from collections import Counter

from grpo.demo.smollm2_task import DEV_PER_KIND, KINDS, TEST_PER_KIND, make_smollm2_splits


def _answer(prompt: str) -> int:
    numbers = [int(n) for n in re.findall(r"\d+", prompt)]
    if "times" in prompt:
        return numbers[0] * numbers[1]
    if "divided" in prompt:
        assert numbers[0] % numbers[1] == 0
        return numbers[0] // numbers[1]
    return numbers[0] + 1


def _fact(row: dict[str, str]) -> tuple:
    """The multiplication fact a times-table question asks about, order aside."""
    numbers = [int(n) for n in re.findall(r"\d+", row["prompt"])]
    if row["kind"] == "divide":
        numbers = [numbers[1], int(row["answer"])]
    return (row["kind"] in ("multiply", "divide"), *sorted(numbers))


def test_every_answer_is_right_and_every_kind_is_in_every_split():
    train, dev, test = make_smollm2_splits()
    for rows in (train, dev, test):
        assert set(Counter(row["kind"] for row in rows)) == set(KINDS)
        for row in rows:
            assert int(row["answer"]) == _answer(row["prompt"]), row
    assert Counter(row["kind"] for row in test) == {kind: TEST_PER_KIND for kind in KINDS}
    assert Counter(row["kind"] for row in dev) == {kind: DEV_PER_KIND for kind in KINDS}


def test_no_fact_is_in_two_splits_in_any_wording():
    train, dev, test = make_smollm2_splits()
    facts = [{_fact(row) for row in rows} for rows in (train, dev, test)]
    assert not facts[0] & facts[1] and not facts[0] & facts[2] and not facts[1] & facts[2]
    # "7 times 4" and "28 divided by 4" are one fact: the times tables share facts across kinds
    times_table = [f for f in facts[2] if f[0]]
    assert len(times_table) < len([r for r in test if r["kind"] in ("multiply", "divide")])


def test_the_splits_are_the_same_every_time():
    assert make_smollm2_splits() == make_smollm2_splits()
