"""GRPO learns on the embedded task: the mean reward rises within a few hundred steps."""

from __future__ import annotations

import pytest

STEPS = 300
WINDOW = 50
MARGIN = 0.08  # mean reward of the last 50 steps minus the first 50; measured ≈ 0.1–0.15


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 300 GRPO steps of the demo: minutes, more on a busy machine
def test_reward_rises_on_the_embedded_task(tmp_path) -> None:
    from grpo.demo.run import run_demo

    outcome = run_demo(
        tmp_path / "demo",
        overrides=[f"train.steps={STEPS}", "eval.every=0", "train.progress=false"],
    )
    rewards = [row["reward/mean"] for row in outcome["history"] if "reward/mean" in row]
    assert len(rewards) == STEPS
    first, last = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    assert last - first >= MARGIN, f"reward {first:.3f} → {last:.3f}"
    assert outcome["after"]["all"] > outcome["before"]["all"]
