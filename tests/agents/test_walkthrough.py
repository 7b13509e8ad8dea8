"""The agents walkthrough (docs/walkthrough.md), run as written: its files are written from the
page's blocks into a fresh folder and its commands run there, on a tiny model and fewer steps
(the only changes, made by appending overrides, listed in SMALLER)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "walkthrough.md"
FILE_MARK = re.compile(r"<!-- walkthrough-file: (\S+) -->\n```\w*\n(.*?)```", re.DOTALL)
COMMANDS_MARK = re.compile(r"<!-- walkthrough-commands -->\n```bash\n(.*?)```", re.DOTALL)
COMMAND_TIMEOUT_S = 300  # each command; a busy machine takes a few times the quiet 10 s
# What makes the run small: the commands' own arguments are kept, these are appended to
# every `grpo train` (a step count in a command is scaled: 20 → 2, 30 → 3).
SMALLER = [
    "--rollout.max_new_tokens=6",
    "--rollout.group_size=2",
    "--train.save_every=1",
    "--train.completions_every=1",
    "--train.progress=false",
    "--train.tensorboard=false",
]


def walkthrough() -> tuple[dict[str, str], list[str]]:
    text = PAGE.read_text()
    files = {path: body for path, body in FILE_MARK.findall(text)}
    (block,) = COMMANDS_MARK.findall(text)
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    return files, commands


def test_the_page_has_the_walkthrough() -> None:
    files, commands = walkthrough()
    assert set(files) == {"units/units.py", "units/train.jsonl", "units/grpo.toml"}
    assert [c.split()[:2] for c in commands] == [
        ["grpo", "train"], ["head", "-n"], ["grpo", "report"], ["grpo", "eval"], ["grpo", "train"]
    ]  # fmt: skip


def _smaller(command: str, model_dir: Path) -> str:
    if not command.startswith("grpo train"):
        return command
    resumed = "--train.steps=30" in command
    steps = "" if resumed else "--train.steps=2"
    scaled = command.replace("--train.steps=30", "--train.steps=3")
    return " ".join([scaled, f"--model.path={model_dir}", steps, *SMALLER])


@pytest.mark.slow  # 3 short training runs, a report and an eval: about a minute
@pytest.mark.timeout(5 * COMMAND_TIMEOUT_S + 60)
def test_the_walkthrough_runs_as_written(tmp_path, ascii_model_dir) -> None:
    files, commands = walkthrough()
    for path, body in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(body)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the modules are found from the config's folder, not here
    for command in commands:
        done = subprocess.run(
            _smaller(command, ascii_model_dir),
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-3000:])
        if command.startswith("head"):  # one row of the first logged step
            row = json.loads(done.stdout)
            assert {"environment", "model"} <= {m["author"] for m in row["conversation"]}
    run = tmp_path / "runs" / "units"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]  # 2 steps, then 1 more resumed
    assert "agent/turns/mean" in metrics[-1] and "accuracy" in metrics[-1]
    assert "Sample conversations" in (run / "report" / "index.html").read_text()
