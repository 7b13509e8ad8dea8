"""The user's environment, tool and reward function sit next to the config, not on
PYTHONPATH, and ``grpo train`` runs from another folder: the learner and its asynchronous
rollout worker (a spawned process that resolves the specs again) both find them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_agent_distributed import MODULE, STOP_STRINGS


@pytest.mark.timeout(600)
def test_modules_and_files_next_to_the_config_are_found_from_another_folder(
    ascii_model_dir: Path, tmp_path: Path
) -> None:
    config_dir, work_dir = tmp_path / "config", tmp_path / "work"
    (config_dir / "tools").mkdir(parents=True)
    work_dir.mkdir()
    (config_dir / "user_env.py").write_text(MODULE)  # DigitGame, the turns reward
    (config_dir / "tools" / "user_tools.py").write_text(MODULE)  # the add tool, as a file
    data = config_dir / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}{n}"}) + "\n" for n in range(4)))
    config = config_dir / "run.toml"
    config.write_text(
        f'[model]\npath = "{ascii_model_dir}"\n'
        f'[data]\ntrain_path = "{data}"\n'
        '[[rewards]]\nfunction = "user_env:turns"\nweight = 0.0\n'
        '[agent]\nenvironment = "user_env:DigitGame"\n'
        'tools = ["tools/user_tools.py:add"]\nmax_turns = 3\n'
        '[rollout]\nmode = "async"\nworkers = 1\ngroup_size = 2\nmax_new_tokens = 5\n'
        f"stop_strings = {json.dumps(list(STOP_STRINGS))}\n"
        f'[train]\nsteps = 2\nprompts_per_step = 2\nrun_dir = "{tmp_path / "run"}"\n'
        "progress = false\ntensorboard = false\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "grpo", "train", str(config)],
        cwd=work_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all("reward/turns/mean" in m and "reward/environment/mean" in m for m in metrics)
    assert max(m["agent/turns/mean"] for m in metrics) > 1  # DigitGame answered: 2 turns
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["train"]["import_dirs"] == [str(config_dir), str(work_dir)]
