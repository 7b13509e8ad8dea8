"""``grpo memory``: the planner (:mod:`grpo.models.memory`) as a table or JSON."""

from __future__ import annotations

import json

from grpo.cli.main import main


def test_grpo_memory_command_prints_the_7b_table(capsys) -> None:
    assert main(["memory", "--params", "7B", "--reward-model"]) == 0
    text = capsys.readouterr().out
    assert "252.0" in text and "140.0" in text
    assert "saving: 112.0 GB = 44.4% of PPO; PPO / GRPO = 1.80×" in text
    assert "PPO = 2 × 112.0 + 2 × 14.0; GRPO = 112.0 + 2 × 14.0" in text
    assert "assumptions:" in text
    assert main(["memory", "--params", "7e9", "--reward-model", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["ppo_total"], data["grpo_total"], data["saving"]) == (252e9, 140e9, 112e9)


def test_grpo_memory_reads_a_local_model_config(tiny_model_dir, capsys) -> None:
    assert (
        main(["memory", "--config", str(tiny_model_dir), "--sequences", "4", "--length", "16"]) == 0
    )
    assert "GRPO" in capsys.readouterr().out
