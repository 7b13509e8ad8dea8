"""GRPO learns on the embedded task: the mean reward rises within a few hundred steps, and
held-out greedy accuracy with it."""

from __future__ import annotations

import shutil

import pytest

STEPS = 200
WINDOW = 30
MARGIN = 0.08  # mean reward of the last 30 steps minus the first 30; measured 0.11–0.12
ACCURACY_MARGIN = 0.10  # held-out greedy accuracy after − before; measured +0.22


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 200 GRPO steps of the demo: minutes, more on a busy machine
def test_reward_rises_on_the_embedded_task(tmp_path, demo_base) -> None:
    from grpo.demo.run import WARM_START_TARGET, run_demo

    shutil.copytree(demo_base, tmp_path / "demo" / "base")  # the run's shared warm start
    outcome = run_demo(
        tmp_path / "demo",
        overrides=[f"train.steps={STEPS}", "eval.every=0", "train.progress=false"],
    )
    assert outcome["warm_start"]["probe_accuracy"] >= WARM_START_TARGET
    rewards = [row["reward/mean"] for row in outcome["history"] if "reward/mean" in row]
    assert len(rewards) == STEPS
    first, last = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    assert last - first >= MARGIN, f"reward {first:.3f} → {last:.3f}"
    gain = outcome["after"]["all"] - outcome["before"]["all"]
    assert gain >= ACCURACY_MARGIN, f"held-out accuracy {outcome['before']['all']:.3f} + {gain:.3f}"
