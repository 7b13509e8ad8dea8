"""Agents under asynchronous rollouts: the environments and tools run in the worker
processes. A 2-turn environment with a tool trains, and at max_staleness 0 the run is the
synchronous one, bit for bit."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo.training.loop import train

from .test_agent_distributed import MODULE


@pytest.fixture
def user_agent(tmp_path, monkeypatch) -> str:
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "agent_env.py").write_text(MODULE)  # DigitGame: 2 turns; the add tool
    monkeypatch.syspath_prepend(str(folder))
    return "agent_env"


SETTINGS = (  # over tiny_config's
    "rewards=[]",
    "agent.environment='agent_env:DigitGame'",
    "agent.tools=['agent_env:add']",
    "agent.max_turns=3",
    "rollout.max_new_tokens=5",
    "rollout.stop_strings=['a', 'e', 'i', 'o', 'u', '1', '2', '3', '4', '5', ' ']",
    "algorithm.beta=0.04",
    "train.steps=3",
    "train.prompts_per_step=2",
)


def _metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if not k.startswith(("time/", "async/")) and "seconds" not in k}
        for r in rows
    ]


def test_environments_run_in_the_workers(
    tiny_config, ascii_model_dir, tmp_path, user_agent
) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}{n}"}) + "\n" for n in range(6)))
    config = functools.partial(tiny_config, *SETTINGS, model=ascii_model_dir, data=data)
    sync = train(config(run_dir=tmp_path / "sync"), verbose=False)
    zero = train(
        config("rollout.mode='async'", "rollout.max_staleness=0", run_dir=tmp_path / "k0"),
        verbose=False,
    )
    assert _metrics(tmp_path / "sync") == _metrics(tmp_path / "k0")
    a, b = (
        load_file(sync.final_dir / "model.safetensors"),
        load_file(zero.final_dir / "model.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
    stale = train(
        config("rollout.mode='async'", "rollout.max_staleness=1", run_dir=tmp_path / "k1"),
        verbose=False,
    )
    last = stale.history[-1]
    assert last["agent/turns/mean"] > 1 and "reward/environment/mean" in last
    assert last["async/version_lag_max"] == 1
