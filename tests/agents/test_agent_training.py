"""Multi-turn training end to end: an environment and a tool through the [agent] section,
composed with LoRA, dynamic sampling, the KL term and checkpoint/resume."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from grpo.config import ConfigError

DIGITS = set("0123456789")


class DigitGame:
    """Two turns: "say more", then a reward, the share of digits the model wrote overall."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.prompt, self.said = row["prompt"], ""

    def reset(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt}]

    def step(self, assistant_text: str) -> tuple[str | None, float | None, bool]:
        first = not self.said
        self.said += assistant_text
        if first:
            return "More digits!", None, False
        return None, sum(c in DIGITS for c in self.said) / max(len(self.said), 1), True


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def assistant_turns(
    prompts: list[str], completions: list[str], conversation: list[list[dict]], **_: Any
) -> list[float]:
    """A configured reward sees the whole conversation as a column."""
    return [float(sum(m["role"] == "assistant" for m in c)) for c in conversation]


SETTINGS = (  # over tiny_config's
    f"agent.environment='{__name__}:DigitGame'",
    f"agent.tools=['{__name__}:add']",
    "agent.max_turns=3",
    f"rewards=[{{ function = '{__name__}:assistant_turns', weight = 0.0 }}]",
    "rollout.max_new_tokens=5",
    "rollout.stop_strings=['a', 'e', 'i', 'o', 'u', '1', '2', '3', '4', '5', ' ']",
    "model.lora_rank=4",
    "algorithm.dynamic_sampling=true",
    "algorithm.max_generation_rounds=2",
    "algorithm.beta=0.04",
    "train.prompts_per_step=2",
    "train.sequences_per_micro_batch=3",
    "train.save_every=1",
    "train.tensorboard=false",
)


def _metric_lines(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if "time/" not in k and "seconds" not in k} for r in rows]


def test_multi_turn_training_with_lora_dynamic_sampling_and_resume(
    tiny_config, ascii_model_dir, tmp_path
) -> None:
    from safetensors.torch import load_file

    from grpo.training.loop import train

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}{n}"}) + "\n" for n in range(6)))
    config = functools.partial(tiny_config, *SETTINGS, model=ascii_model_dir, data=data)
    straight = train(config("train.steps=3", run_dir=tmp_path / "straight"), verbose=False)
    metrics = straight.history[-1]
    assert metrics["agent/turns/mean"] > 1
    assert metrics["reward/assistant_turns/mean"] == metrics["agent/turns/mean"]
    assert 0 < metrics["agent/env_token_frac"] < 1
    assert "agent/timeout/errors" in metrics and "reward/environment/mean" in metrics
    assert any(row["groups_trained"] > 0 for row in straight.history)
    train(config("train.steps=2", run_dir=tmp_path / "stopped"), verbose=False)
    train(config("train.steps=3", "train.resume=true", run_dir=tmp_path / "stopped"), verbose=False)
    assert _metric_lines(tmp_path / "stopped") == _metric_lines(tmp_path / "straight")
    name = "final/model.safetensors"
    a, b = load_file(tmp_path / "straight" / name), load_file(tmp_path / "stopped" / name)
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_a_bad_agent_setting_names_the_field(tiny_config, tmp_path) -> None:
    # PPO, FSDP, data.chat_template and the overlong shaping combine with [agent]
    # (tests/agents/test_agent_combinations.py, test_agent_overlong.py).
    with pytest.raises(ConfigError, match=r"agent\.max_turns"):
        tiny_config(*SETTINGS, "agent.max_turns=0", model=tmp_path, data=tmp_path / "d.jsonl")
