"""The metric table names every key the trainer can log: the docs glossary documents
exactly its keys, and the log refuses a key the table lacks (so every run in the suite,
single-turn, multi-turn, PPO, corrections, curriculum, checks its keys as it writes them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grpo.log.metric_table import METRICS, Reduce, metric, reduce_processes
from grpo.log.metrics import MetricsLog

GLOSSARY = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"


def _glossary() -> set[str]:
    section = GLOSSARY.read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def test_every_key_of_the_table_is_in_the_glossary() -> None:
    missing = sorted({row.key for row in METRICS} - _glossary())
    assert missing == [], "add these keys to grpo.log.metric_glossary, then: grpo docs --write docs"


def test_every_key_of_the_glossary_is_in_the_table() -> None:
    # The glossary also shows instances of the patterns (reward/total/…) and the step.
    unknown = []
    for key in sorted(_glossary() - {"step"}):
        try:
            metric(key)
        except KeyError:
            unknown.append(key)
    assert unknown == [], "the glossary documents keys the metric table lacks"


def test_exact_keys_win_over_patterns() -> None:
    assert metric("reward/mean").over_processes is Reduce.WHOLE_STEP
    assert metric("reward/exact/mean").over_processes is Reduce.MEAN
    assert metric("agent/tool/errors").key == "agent/<kind>/errors"


def test_reductions_follow_the_table() -> None:
    # Two processes: sums add, extremes take the extreme, means of equal shards average,
    # whole-step values are already equal, and the std pools with its /mean sibling.
    gathered = {
        "loss": [0.25, 0.5],
        "ratio_max": [1.5, 1.25],
        "ratio_min": [0.5, 0.75],
        "agent/turns/mean": [1.0, 3.0],
        "reward/mean": [0.5, 0.5],
        "reward/exact/mean": [1.0, 4.0],
        "reward/exact/std": [1.0, 0.0],
        "time/step": [2.0, 3.0],
    }
    reduced = reduce_processes(gathered)
    assert reduced["loss"] == 0.75
    assert (reduced["ratio_max"], reduced["ratio_min"]) == (1.5, 0.5)
    assert reduced["agent/turns/mean"] == 2.0 and reduced["reward/mean"] == 0.5
    assert reduced["reward/exact/mean"] == 2.5
    assert reduced["reward/exact/std"] == pytest.approx(2.75**0.5)  # std of {0, 2, 4, 4}
    assert reduced["time/step"] == 3.0


def test_the_log_refuses_a_key_the_table_lacks(tmp_path) -> None:
    log = MetricsLog(tmp_path, tensorboard=False)
    log.write(1, {"reward/mean": 0.5, "reward/exact/errors": 1.0})
    with pytest.raises(KeyError, match="'reward/means' is not in the metric table"):
        log.write(2, {"reward/means": 0.5})
    log.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "reward/mean": 0.5, "reward/exact/errors": 1.0}]


def test_a_whole_run_logs_only_keys_of_the_table(trained_run_dir) -> None:
    lines = (trained_run_dir / "metrics.jsonl").read_text().splitlines()
    keys = {key for line in lines for key in json.loads(line)} - {"step"}
    assert {"loss", "kl", "grad_norm", "reward/mean", "eval/accuracy"} <= keys
    for key in keys:
        metric(key)  # raises KeyError for a key the table lacks
