import json
import subprocess
import sys

import pytest


def _grpo(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grpo", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_bad_override_names_the_key(tmp_path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[model]\npath = "m"\n[data]\ntrain_path = "d.jsonl"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
    )
    result = _grpo("train", str(config), "--rollout.grup_size=4")
    assert result.returncode == 2
    assert "unknown config key 'rollout.grup_size'" in result.stderr


def test_missing_model_directory_is_a_clear_error(tmp_path, arithmetic_jsonl) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[model]\npath = "{tmp_path / "nope"}"\n[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
    )
    result = _grpo("train", str(config))
    assert result.returncode == 2
    assert "model.path" in result.stderr or "nope" in result.stderr


def test_train_then_plot(tmp_path, tiny_model_dir, arithmetic_jsonl) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
        f'[train]\nsteps = 2\nprompts_per_step = 2\nrun_dir = "{tmp_path / "run"}"\n'
        "[rollout]\ngroup_size = 2\nmax_new_tokens = 4\n"
    )
    result = _grpo("train", str(config), "--train.progress=false")
    assert result.returncode == 0, result.stderr
    assert "2 prompts/step × G=2 = 4 sequences/step" in result.stdout
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [row["step"] for row in rows] == [1, 2]
    plot = _grpo("plot", str(tmp_path / "run"))
    assert plot.returncode == 0 and "reward/mean" in plot.stdout


@pytest.mark.slow
def test_demo_quick_runs_end_to_end(tmp_path) -> None:
    result = _grpo("demo", "--quick", "--work-dir", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "held-out greedy accuracy" in result.stdout
    assert (tmp_path / "demo" / "run" / "final" / "model.safetensors").exists()
