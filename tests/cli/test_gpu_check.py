"""scripts/gpu_check.sh in its dry mode (CPU, tiny model, 1 step), so it cannot rot before a
GPU is lent: every part runs, and the results files hold consistent numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)  # above the subprocess's own
def test_gpu_check_dry_runs_every_part_and_writes_its_results(tmp_path) -> None:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "results.json").read_text())
    rollout = report["rollout"]
    tokens = report["prompts"] * report["group"] * report["new_tokens"]  # 8 × 8 × 8
    assert tokens == 512
    assert rollout["engine_tokens_per_s"] == pytest.approx(tokens / rollout["engine_s"])
    assert rollout["generate_tokens_per_s"] == pytest.approx(tokens / rollout["generate_s"])
    assert rollout["peak_gpu_bytes"] is None  # no GPU: no GPU memory is claimed
    ours = report["training"]["grpo"]
    assert ours["steps"] == 1 and ours["median"]["step"] > 0
    trl = report["training"]["trl"]
    # TRL is in the test environment (the dev extra), so its run is not skipped here.
    assert "skipped" not in trl and trl["median"]["step"] > 0
    table = (tmp_path / "results.md").read_text()
    assert "rollout tokens/s" in table and "step time, median (s) vs TRL" in table
