"""Under torchrun each process creates and resets the environments of its own rows only,
and an environment that draws from a ``random.Random`` seeded per row (as the README says
to) gives a 2-process run equal to the 1-process run, conversation for conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MODULE = """
import json, os, random


class Lottery:
    def __init__(self, row):
        path = os.environ["GRPO_TEST_DUMP"] + ".created." + os.environ.get("RANK", "0")
        with open(path, "a") as handle:
            handle.write(row["prompt"] + "\\n")
        self.prompt, self.rng, self.draws = row["prompt"], random.Random(row["seed"]), 0

    def reset(self):
        return [{"role": "user", "content": self.prompt}]

    def step(self, text):
        self.draws += 1
        draw = self.rng.random()
        if self.draws == 2:
            return None, draw, True
        return f"drew {draw:.4f}", None, False


def log(prompts, completions, conversation, env_reward, **_):
    path = os.environ["GRPO_TEST_DUMP"] + "." + os.environ.get("RANK", "0")
    with open(path, "a") as handle:
        handle.write(json.dumps({"conversation": conversation, "env": env_reward}) + "\\n")
    return [0.0] * len(completions)
"""

# Every character ends a turn, so each row reaches its environment's step every turn.
STOPS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(48, 58)]


def _run(gloo_jobs, model_dir: Path, data: Path, processes: int, name: str):
    config = gloo_jobs.tmp_path / "grpo.toml"
    config.write_text(f'[model]\npath = "{model_dir}"\n')
    result = gloo_jobs.run(
        processes,
        name,
        config,
        f"--data.train_path={data}",
        "--agent.environment=lottery_env:Lottery",
        "--agent.max_turns=3",
        "--rewards=[{function='lottery_env:log', weight=0.0}]",
        "--rollout.group_size=2",
        "--rollout.max_new_tokens=4",
        f"--rollout.stop_strings={[*STOPS, ' ', '.', ',']}",
        "--optim.lr=1e-3",
        "--train.steps=2",
        "--train.prompts_per_step=3",  # 6 rows, 3 per process: prompt 1's group is split
        "--train.sequences_per_micro_batch=2",
        "--train.progress=false",
        "--train.tensorboard=false",
    )
    assert result.returncode == 0, result.stderr[-4000:]


def _created(tmp_path: Path, name: str, rank: int) -> list[str]:
    return (tmp_path / f"{name}.dump.created.{rank}").read_text().splitlines()


@pytest.mark.slow  # two real grpo train jobs, one of them under torchrun: about 30 s
def test_each_process_opens_only_its_rows_and_two_processes_equal_one(
    ascii_model_dir, gloo_jobs
) -> None:
    tmp_path = gloo_jobs.tmp_path
    (tmp_path / "lottery_env.py").write_text(MODULE)
    data = tmp_path / "prompts.jsonl"
    rows = [json.dumps({"prompt": f"Pick {n}", "seed": 100 + n}) for n in range(6)]
    data.write_text("\n".join(rows) + "\n")
    _run(gloo_jobs, ascii_model_dir, data, 1, "one")
    _run(gloo_jobs, ascii_model_dir, data, 2, "two")
    # 2 steps × 3 prompts: one process creates 6 environments. Of 2, each creates those of
    # the 2 prompts its 3 rows touch (prompt 1's group is split): 4 each, not 6.
    assert len(_created(tmp_path, "one", 0)) == 6
    assert [len(_created(tmp_path, "two", rank)) for rank in (0, 1)] == [4, 4]
    single, double = gloo_jobs.steps("one", 1), gloo_jobs.steps("two", 2)
    assert double == single  # every conversation and environment reward, row for row
    assert any(reward > 0 for step in single for reward in step["env"])
    gloo_jobs.assert_same_run("one", "two")
