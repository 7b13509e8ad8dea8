"""No rollout worker outlives its run: after a normal end, an error, Ctrl-C, or the
learner's own death. Each case runs ``python -m grpo train`` with real worker processes and
checks, by process id, that every worker is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAILING_REWARD = """
STEP = {"calls": 0}

def fails_on_third_call(prompts, completions, **_):
    STEP["calls"] += 1
    if STEP["calls"] == 3:
        raise ValueError("a reward that breaks")
    return [0.0 for _ in completions]
"""


def _start(
    tmp_path: Path, user_code: Path, model: Path, data: Path, steps: int, *rewards: str
) -> subprocess.Popen:
    """``grpo train`` in a process of its own; ``rewards`` are functions by name, of the
    shared ``user_rewards`` (in ``user_code``) or of this file's ``failing_rewards``."""
    (tmp_path / "failing_rewards.py").write_text(FAILING_REWARD)
    tables = "".join(f'[[rewards]]\nfunction = "{spec}"\n' for spec in rewards)
    (tmp_path / "run.toml").write_text(
        f'[model]\npath = "{model}"\n[data]\ntrain_path = "{data}"\n'
        '[rollout]\ngroup_size = 4\nmax_new_tokens = 6\nmode = "async"\nmax_staleness = 1\n'
        f'[train]\nsteps = {steps}\nprompts_per_step = 4\nrun_dir = "{tmp_path / "run"}"\n'
        f"progress = false\n{tables}"
    )
    path = os.pathsep.join([str(tmp_path), str(user_code)])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "grpo", "train", str(tmp_path / "run.toml")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (the workers, and multiprocessing's helper)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":  # a zombie has exited; its parent has not reaped it yet
            alive.add(pid)
    return alive


def _workers_once_running(process: subprocess.Popen, run_dir: Path) -> set[int]:
    """The learner's child processes, once a step has been logged (workers are up)."""
    deadline = time.monotonic() + 180
    while not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text():
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return _children(process.pid)


def _gone_soon(pids: set[int], timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pids)


@pytest.mark.parametrize("case", ["normal", "ctrl-c", "error", "learner killed"])
def test_no_worker_is_left_behind(
    case, user_code_dir, tiny_model_dir, arithmetic_jsonl, tmp_path
) -> None:
    steps = 3 if case == "normal" else 200
    failing = ["failing_rewards:fails_on_third_call"] if case == "error" else []
    rewards = ["user_rewards:digit_fraction", *failing]
    process = _start(tmp_path, user_code_dir, tiny_model_dir, arithmetic_jsonl, steps, *rewards)
    try:
        workers = _workers_once_running(process, tmp_path / "run")
        assert workers, "no worker process was started"
        if case == "ctrl-c":
            process.send_signal(signal.SIGINT)
        elif case == "learner killed":
            process.kill()
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    if case == "normal":
        assert process.returncode == 0, output
        assert (
            len(
                json.loads(
                    "["
                    + ",".join((tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
                    + "]"
                )
            )
            == 3
        )
    elif case == "ctrl-c":
        assert process.returncode == 0 and "stopped by SIGINT" in output, output
    elif case == "error":
        assert process.returncode != 0
        # The user's reward failed in the worker: the run's one line names it, as in a
        # synchronous run, with the reward's own frame after it.
        assert "grpo train: error: step " in output and "reward 'fails_on_third_call'" in output
        assert "raised ValueError: a reward that breaks" in output, output
        assert "in fails_on_third_call" in output and "Traceback" not in output, output
    assert _gone_soon(workers), f"{case}: left behind: {_alive(workers)}"
