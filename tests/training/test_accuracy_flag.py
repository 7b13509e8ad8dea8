"""``[[rewards]] accuracy = true``: a user's own function drives ``accuracy``, the
``groups/*`` counts and ``grpo eval``, with no other setting (tiny model, one step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo.config import ConfigError, load_config

# Group k of 4 completions (rows 4k..4k+3), k mod 4: mixed, all right, all wrong, all wrong.
# "verdict" gives 2.0 for right (≥ 1: correct) and 0.0 for wrong; "half" adds 0.5 to every
# row, so the *total* never says "all wrong": only the accuracy reward can.
REWARDS_MODULE = """
PATTERN = [[2.0, 0.0, 2.0, 0.0], [2.0] * 4, [0.0] * 4, [0.0] * 4]


def verdict(prompts, completions, **columns):
    return [PATTERN[(row // 4) % 4][row % 4] for row in range(len(completions))]


def half(prompts, completions, **columns):
    return [0.5] * len(completions)
"""


@pytest.fixture
def user_rewards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    module = f"user_rewards_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(REWARDS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return module


def _toml(tiny_model_dir: Path, data: Path, run_dir: Path, module: str, accuracy: bool) -> str:
    flag = "accuracy = true\n" if accuracy else ""
    return (
        f'[model]\npath = "{tiny_model_dir}"\n[data]\ntrain_path = "{data}"\n'
        f'[[rewards]]\nfunction = "{module}:verdict"\n{flag}'
        f'[[rewards]]\nfunction = "{module}:half"\n'
        f'[train]\nsteps = 1\nprompts_per_step = 4\nrun_dir = "{run_dir}"\nprogress = false\n'
        "[rollout]\ngroup_size = 4\nmax_new_tokens = 3\n[algorithm]\nbeta = 0.0\n"
    )


def test_a_user_reward_marked_accuracy_drives_accuracy_groups_and_eval(
    tiny_model_dir, arithmetic_jsonl, tmp_path, user_rewards
) -> None:
    from grpo.cli.main import main
    from grpo.training.loop import train

    marked = tmp_path / "marked.toml"
    marked.write_text(_toml(tiny_model_dir, arithmetic_jsonl, tmp_path / "a", user_rewards, True))
    [step] = train(load_config(str(marked), []), verbose=False).history
    # 16 completions: 2 + 4 right = 6 → accuracy 6/16; groups: 1 all right, 2 all wrong, 1 mixed.
    assert step["accuracy"] == pytest.approx(6 / 16)
    assert step["groups/all_correct_frac"] == pytest.approx(1 / 4)
    assert step["groups/all_wrong_frac"] == pytest.approx(2 / 4)
    assert step["groups/mixed_frac"] == pytest.approx(1 / 4)

    plain = tmp_path / "plain.toml"
    plain.write_text(_toml(tiny_model_dir, arithmetic_jsonl, tmp_path / "b", user_rewards, False))
    [unmarked] = train(load_config(str(plain), []), verbose=False).history
    assert "accuracy" not in unmarked  # no accuracy reward: groups/* come from the total
    assert unmarked["groups/all_wrong_frac"] == 0.0  # wrong rows still total 0.5

    report = tmp_path / "eval.json"
    argv = ["eval", str(tiny_model_dir), str(arithmetic_jsonl), "--config", str(marked)]
    assert main([*argv, "--max-new-tokens", "2", "--json", str(report)]) == 0
    result = json.loads(report.read_text())
    # 64 greedy completions, 6 of each 16 scored 2.0 by "verdict": 24/64 correct.
    assert result["correct_reward"] == "verdict"
    assert result["pass@1_greedy"] == pytest.approx(24 / 64)
    assert main([*argv[:-1], str(plain), "--max-new-tokens", "2"]) != 0  # no accuracy reward


def test_two_rewards_claiming_accuracy_is_an_error(tmp_path, user_rewards) -> None:
    tables = [
        f'{{ function = "{user_rewards}:{name}", accuracy = true }}' for name in ("verdict", "half")
    ]
    with pytest.raises(ConfigError, match=r"rewards\[1\]\.accuracy: rewards\[0\] is already"):
        load_config(
            None, ["--model.path=m", "--data.train_path=d", f"--rewards=[{','.join(tables)}]"]
        )
