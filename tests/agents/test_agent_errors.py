"""An environment that fails, under each ``agent.env_on_error``: the run names the dataset
file and row; ``zero`` and ``skip_group`` go on, print the first failure's text, and a
failed trajectory earns nothing from the configured rewards either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grpo.agents.environment import EnvironmentError_
from grpo.config import load_config

from .conftest import ASCII


class Sized:
    """Parses the row's ``size`` column (row 3 of the file has "six"); one turn, reward 0.5;
    a step on a row of size 0 raises."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.size = int(row["size"])

    def reset(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"Say {self.size}"}]

    def step(self, assistant_text: str) -> tuple[str | None, float | None, bool]:
        if self.size == 0:
            raise ZeroDivisionError("size 0")
        return None, 0.5, True


def _every_character() -> str:
    """A TOML list of every character of the tokenizer: each turn stops after one token,
    so every row reaches its environment's step."""
    quoted = ['"\'"' if c == "'" else '"\\n"' if c == "\n" else f"'{c}'" for c in ASCII]
    return "[" + ", ".join(quoted) + "]"


def always_one(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    return [1.0] * len(completions)


def _train(model_dir: Path, tmp_path: Path, sizes: list[str], policy: str) -> Any:
    from grpo.training.loop import train

    data = tmp_path / "prompts.jsonl"
    rows = [json.dumps({"prompt": "p", "size": size}) for size in sizes]
    data.write_text("\n".join(rows) + "\n")
    config = load_config(
        None,
        [
            f"model.path='{model_dir}'",
            f"data.train_path='{data}'",
            f"agent.environment='{__name__}:Sized'",
            f"agent.env_on_error='{policy}'",
            f"rewards=[{{ function = '{__name__}:always_one' }}]",
            "rollout.group_size=2",
            "rollout.max_new_tokens=3",
            f"rollout.stop_strings={_every_character()}",
            "train.steps=1",
            f"train.prompts_per_step={len(sizes)}",  # every row in the one step
            f"train.run_dir='{tmp_path / 'run'}'",
            "train.progress=false",
            "train.tensorboard=false",
        ],
    )
    return train(config, verbose=False)


BAD_CONSTRUCTOR = ["1", "2", "six", "4"]  # file row 3


def test_a_constructor_error_under_fail_names_the_file_and_row(ascii_model_dir, tmp_path) -> None:
    with pytest.raises(
        EnvironmentError_, match=r"prompts\.jsonl: row 3: __init__ raised ValueError"
    ):
        _train(ascii_model_dir, tmp_path, BAD_CONSTRUCTOR, "fail")


@pytest.mark.parametrize("policy", ["zero", "skip_group"])
def test_a_constructor_error_ends_its_group_and_the_run_goes_on(
    ascii_model_dir, tmp_path, capfd, policy: str
) -> None:
    """4 prompts × G = 2; the group of file row 3 fails before any turn. Its 2 rows count
    as environment errors and earn 0 in total (always_one's 1 does not count); the other 6
    rows earn 1 + 0.5. zero: reward/total/mean = 6·1.5/8; skip_group: the group is left
    out (the total is over the rows scored)."""
    result = _train(ascii_model_dir, tmp_path, BAD_CONSTRUCTOR, policy)
    metrics = result.history[-1]
    assert metrics["agent/environment/errors"] == 2
    assert metrics["reward/total/mean"] == pytest.approx(6 * 1.5 / 8)
    assert metrics["reward/environment/mean"] == pytest.approx(6 * 0.5 / 8)
    if policy == "skip_group":
        assert metrics["skipped_groups"] == 1
    printed = capfd.readouterr().err
    assert "prompts.jsonl: row 3" in printed and "ValueError" in printed and policy in printed
    assert printed.count("grpo: environment Sized") == 1  # the first failure only


def test_a_step_error_under_zero_ends_the_row_with_reward_0(
    ascii_model_dir, tmp_path, capfd
) -> None:
    """Row 2 of the file has size 0: its step raises after the first turn. 3 prompts × 2:
    the 2 failing rows earn 0 in total; the 4 others 1.5."""
    result = _train(ascii_model_dir, tmp_path, ["1", "0", "3"], "zero")
    metrics = result.history[-1]
    assert metrics["agent/environment/errors"] == 2
    assert metrics["reward/total/mean"] == pytest.approx(4 * 1.5 / 6)
    printed = capfd.readouterr().err
    assert (
        "prompts.jsonl: row 2, trajectory 1 of 2: step() raised ZeroDivisionError: size 0"
        in printed
    )
    (tmp_path / "fail").mkdir()
    with pytest.raises(
        EnvironmentError_, match=r"prompts\.jsonl: row 2, trajectory 1 of 2: step\(\) raised"
    ):
        _train(ascii_model_dir, tmp_path / "fail", ["1", "0", "3"], "fail")
