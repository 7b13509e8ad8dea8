"""Asynchronous rollouts end to end on a tiny random model, with real worker processes:
at max_staleness 0 the run is the synchronous one, bit for bit; above it the lag stays
within the bound and the metrics say so."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from grpo.training.loop import train

TIMING = ("time/", "async/")


@pytest.fixture(autouse=True)
def _rewards(user_rewards) -> None:
    pass


SETTINGS = (  # over tiny_config's
    "rewards=[{function='user_rewards:digit_fraction'}, "
    "{function='grpo.rewards:numeric_answer', weight=0.5}]",
    "train.steps=3",
    "train.sequences_per_micro_batch=8",
    "algorithm.beta=0.05",
)


def _weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final" / "model.safetensors"))


def _metrics(run_dir) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in row.items() if not k.startswith(TIMING) and not k.endswith("/seconds")}
        for row in rows
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_staleness_zero_is_the_synchronous_run(tiny_config, tmp_path, workers) -> None:
    sync = tiny_config(*SETTINGS, run_dir=tmp_path / "sync")
    train(sync, verbose=False)
    overlapped = tiny_config(
        *SETTINGS,
        "rollout.mode='async'",
        "rollout.max_staleness=0",
        f"rollout.workers={workers}",
        run_dir=tmp_path / "async",
    )
    train(overlapped, verbose=False)
    expected, got = _weights(tmp_path / "sync"), _weights(tmp_path / "async")
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), name
    if workers == 1:
        assert _metrics(tmp_path / "sync") == _metrics(tmp_path / "async")
    else:  # chunk metrics combine like 2 processes' (float64 means of float32 means), and
        # the workers' log-probs come from batches of 8 rows, not 16: equal to rounding
        for want, have in zip(
            _metrics(tmp_path / "sync"), _metrics(tmp_path / "async"), strict=True
        ):
            assert have == pytest.approx(want, rel=1e-6, abs=1e-7)


def test_one_step_stale_stays_within_the_bound(tiny_config):
    config = tiny_config(
        *SETTINGS,
        "rollout.mode='async'",
        "rollout.max_staleness=1",
        "train.steps=4",
    )
    result = train(config, verbose=False)
    rows = result.history
    assert [row["async/version_lag_max"] for row in rows] == [0.0, 1.0, 1.0, 1.0]
    assert rows[0]["async/sync_bytes"] > 0
    assert all(row["async/groups_at_lag/1"] == 4 for row in rows[1:])
    assert all(row["async/worker_restarts"] == 0 for row in rows)


def test_dynamic_sampling_and_the_curriculum_compose_at_staleness_one(
    tiny_config, tmp_path
) -> None:
    """Rounds are filtered on arrival and refills requested while later steps' rounds stay
    in flight; the curriculum's statistics come from the rounds that arrived."""
    config = tiny_config(
        *SETTINGS,
        "rollout.mode='async'",
        "rollout.max_staleness=1",
        "rollout.workers=2",
        "train.steps=4",
        "rollout.group_size=2",
        "algorithm.dynamic_sampling=true",
        "algorithm.max_generation_rounds=3",
        "curriculum.enabled=true",
    )
    result = train(config, verbose=False)
    rows = result.history
    assert max(row["generation_rounds"] for row in rows) > 1  # refills were requested
    assert all(row["async/version_lag_max"] <= 1 for row in rows)
    groups = sum(row.get(f"async/groups_at_lag/{lag}", 0) for row in rows for lag in (0, 1))
    assert groups == sum(4 * row["generation_rounds"] for row in rows)  # every round counted
    stats = (tmp_path / "run" / "prompt_stats.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["attempts"] for line in stats) == 2 * groups  # G = 2
