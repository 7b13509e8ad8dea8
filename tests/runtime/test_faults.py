"""Faults: non-finite updates stop the run after K in a row; SIGTERM/SIGINT stop it cleanly.

The numerical fault is real: with optim.lr = 1e30 the first AdamW step moves every weight
by ~1e30, and the next step's gradients overflow to nan.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.rewards.runner import RewardFunction
from grpo.runtime.checkpoint import verify_checkpoint
from grpo.runtime.faults import GracefulStop, TrainingStopped
from tests.user_code.user_rewards import digit_fraction


def test_non_finite_updates_are_skipped_then_the_run_stops_at_the_limit(
    tiny_config, tmp_path
) -> None:
    from grpo.training.loop import train

    run_dir = tmp_path / "run"
    config = tiny_config(
        "train.steps=6",
        "train.prompts_per_step=2",
        "rollout.max_new_tokens=4",
        "algorithm.beta=0.0",
        "optim.lr=1e30",  # the weights overflow after the first update
        "train.save_every=1",
        "train.max_consecutive_skips=2",
        "train.tensorboard=false",
    )
    rewards = [RewardFunction(name="digit_fraction", fn=digit_fraction)]
    with pytest.raises(TrainingStopped) as stopped:
        train(config, reward_functions=rewards, verbose=False)
    message = str(stopped.value)
    assert "\n" not in message
    assert message.startswith("stopped at step 3: 2 consecutive optimizer update(s) skipped")
    assert "train.max_consecutive_skips = 2" in message
    assert f"the last good checkpoint is {run_dir / 'checkpoints' / 'step-1'}" in message
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(row["step"], row["skipped_updates"]) for row in rows] == [(1, 0), (2, 1), (3, 1)]
    # No checkpoint during the streak: step-1 is still the latest, complete and readable.
    assert (run_dir / "checkpoints" / "latest").read_text() == "step-1\n"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step-1"]
    assert verify_checkpoint(run_dir / "checkpoints" / "step-1") == 1


def test_first_signal_is_a_request_and_the_second_acts_as_usual() -> None:
    # "As usual" is whatever handler was there before: Python's own here, whatever an
    # earlier test in this worker process left behind.
    earlier = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with GracefulStop(announce=False) as stop:
            signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt: only noted
            assert stop.received == "SIGINT"
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, earlier)


def _start(config: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    return subprocess.Popen(
        [sys.executable, "-m", "grpo", "train", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_a_signal_finishes_the_step_checkpoints_and_exits_0(
    tiny_model_dir, arithmetic_jsonl, tmp_path, signum
) -> None:
    from grpo.training.loop import train

    run_dir = tmp_path / "run"
    config = tmp_path / "c.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
        "[rollout]\ngroup_size = 2\nmax_new_tokens = 4\n"
        f'[train]\nsteps = 1000\nprompts_per_step = 2\nrun_dir = "{run_dir}"\n'
        "progress = false\ntensorboard = false\n"
    )
    process = _start(config)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and metrics.read_text().strip()):  # training has started
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    process.send_signal(signum)
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, err[-3000:]
    name = signal.Signals(signum).name
    assert f"{name} received: finishing this step" in err
    assert f"resume with: grpo train {config} --resume" in out
    last = json.loads(metrics.read_text().splitlines()[-1])["step"]
    assert 1 <= last < 1000
    assert (run_dir / "checkpoints" / "latest").read_text() == f"step-{last}\n"
    assert verify_checkpoint(run_dir / "checkpoints" / f"step-{last}") == last
    assert not (run_dir / "final").exists()  # the run is not finished
    resumed = load_config(config, [f"train.steps={last + 1}", "train.resume=true"])
    result = train(resumed, verbose=False)
    assert [row["step"] for row in result.history] == [last + 1]
