import json
import math

import pytest
import torch

from grpo.log.metrics import completion_rows, markdown_table, open_trackers, read_completions


def test_completion_rows_carry_each_reward_the_total_and_the_advantage() -> None:
    rows = completion_rows(
        7,
        ["p0", "p0"],
        ["a", "b"],
        {"acc": torch.tensor([1.0, 0.0]), "fmt": torch.tensor([0.5, 0.25])},
        torch.tensor([1.25, 0.125]),
        torch.tensor([1.0, -1.0]),
    )
    assert rows == [
        {"step": 7, "prompt": "p0", "completion": "a", "reward": 1.25,
         "rewards": {"acc": 1.0, "fmt": 0.5}, "advantage": 1.0},
        {"step": 7, "prompt": "p0", "completion": "b", "reward": 0.125,
         "rewards": {"acc": 0.0, "fmt": 0.25}, "advantage": -1.0},
    ]  # fmt: skip


def test_markdown_table_escapes_pipes_and_newlines() -> None:
    rows = [{"prompt": "a|b", "completion": "x\ny", "reward": 0.5,
             "rewards": {"acc": 1.0}, "advantage": -0.25}]  # fmt: skip
    assert markdown_table(rows).splitlines() == [
        "| prompt | completion | reward | acc | advantage |",
        "|---|---|---|---|---|",
        "| a\\|b | x<br>y | 0.5 | 1 | -0.25 |",
    ]


def test_the_run_logs_completion_tables_every_n_steps(trained_run_dir) -> None:
    rows = read_completions(trained_run_dir)
    # train.completions_every = 2 over 4 steps; 2 prompts × G = 4 rows per logged step.
    assert [row["step"] for row in rows] == [2] * 8 + [4] * 8
    for row in rows:
        rewards = row["rewards"]
        assert set(rewards) == {"numeric_answer", "digit_fraction"}
        assert row["reward"] == pytest.approx(
            rewards["numeric_answer"] + 0.5 * rewards["digit_fraction"]
        )
        assert row["prompt"].endswith("=") and isinstance(row["completion"], str)
    for start in range(0, len(rows), 4):  # each group of G = 4: A = (r − mean)/(σ + 1e-4)
        group = rows[start : start + 4]
        assert len({row["prompt"] for row in group}) == 1
        rewards = [row["reward"] for row in group]
        mean = sum(rewards) / 4
        sigma = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 4)
        for row, reward in zip(group, rewards, strict=True):
            assert row["advantage"] == pytest.approx((reward - mean) / (sigma + 1e-4), abs=1e-5)


def test_completion_tables_reach_tensorboard(trained_run_dir) -> None:
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    events = event_accumulator.EventAccumulator(str(trained_run_dir / "tensorboard"))
    events.Reload()
    assert "completions/text_summary" in events.Tags()["tensors"]
    logged = events.Tensors("completions/text_summary")
    assert [event.step for event in logged] == [2, 4]
    text = logged[0].tensor_proto.string_val[0].decode()
    assert text.startswith(
        "| prompt | completion | reward | numeric_answer | digit_fraction | advantage |"
    )


def test_a_tracker_that_is_not_installed_is_skipped_with_a_warning(tmp_path) -> None:
    try:
        import wandb  # noqa: F401

        pytest.skip("wandb is installed here: nothing to skip")
    except ImportError:
        pass
    warnings: list[str] = []
    trackers = open_trackers({"wandb": "my-project", "trackio": ""}, tmp_path, {}, warnings.append)
    assert trackers == []
    assert warnings == [
        "train.wandb_project is set but wandb is not installed (pip install 'grpo[wandb]'): "
        "not logging to wandb"
    ]


def test_wandb_offline_gets_metrics_and_the_completion_table(tmp_path, monkeypatch) -> None:
    pytest.importorskip("wandb")
    from grpo.log.metrics import MetricsLog
    from grpo.rewards import RewardScores

    monkeypatch.setenv("WANDB_MODE", "offline")  # never the network
    monkeypatch.setenv("WANDB_SILENT", "true")
    log = MetricsLog(
        tmp_path, tensorboard=False, completions_every=1, trackers={"wandb": "grpo-test"}
    )
    log.write(1, {"reward/mean": 0.5})

    scores = RewardScores(
        total_B=torch.tensor([1.0, 0.0]),
        per_function={"acc": torch.tensor([1.0, 0.0])},
        skip_B=torch.zeros(2, dtype=torch.bool),
        metrics={},
    )
    log.completions(1, ["p", "p"], ["a", "b"], scores, torch.tensor([1.0, -1.0]))
    log.close()
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 1, "reward/mean": 0.5}
