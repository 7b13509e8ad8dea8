"""One process per run directory: a second `grpo train` into a run directory in use stops
at once naming the first (exit 2); a holder killed by SIGKILL blocks no resume, not even
while a process it forked lives on; without OS locks a record of a dead process is
replaced; a rollout worker is given no run directory. (Under torchrun rank 0 takes the one
lock: tests/training/test_distributed.py.)"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo.runtime import run_lock
from grpo.runtime.run_lock import LOCK_FILE, RunDirInUse, acquire_run_lock, read_holder

SLOW_REWARD = """
import time


def slow_digits(prompts, completions, **_):
    time.sleep(0.3)
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]
"""


def _grpo(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    return subprocess.Popen(
        [sys.executable, "-m", "grpo", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def _wait_for(condition, process: subprocess.Popen, what: str, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {process.communicate()}")
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.05)


def test_a_second_run_is_refused_and_a_sigkilled_holder_blocks_no_resume(
    tmp_path, tiny_model_dir, arithmetic_jsonl
) -> None:
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    config = tmp_path / "grpo.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "slow_reward:slow_digits"\n'
        "[rollout]\ngroup_size = 2\nmax_new_tokens = 3\n"
        "[train]\nsteps = 200\nprompts_per_step = 2\nsave_every = 1\n"
        'run_dir = "run"\nprogress = false\ntensorboard = false\n'
    )
    run_dir = tmp_path / "run"
    first = _grpo(tmp_path, str(config))
    try:
        checkpoint = run_dir / "checkpoints" / "latest"
        _wait_for(checkpoint.exists, first, "checkpoint")  # well inside the run
        holder = read_holder(run_dir / LOCK_FILE)
        assert holder is not None and holder.pid == first.pid
        assert holder.host == socket.gethostname() and "grpo train" in holder.command
        started = time.monotonic()
        second = _grpo(tmp_path, str(config), "--resume")
        _, stderr = second.communicate(timeout=240)
        assert second.returncode == 2, stderr
        assert (
            f"grpo train: error: train.run_dir {run_dir.name} is in use by another run: " in stderr
        )
        assert f"process {first.pid} on {socket.gethostname()}, since " in stderr
        assert "Traceback" not in stderr and first.poll() is None  # the first one runs on
        assert not (run_dir / "report").exists()
        print(f"refused after {time.monotonic() - started:.1f} s (process start included)")
        first.send_signal(signal.SIGKILL)
        first.wait()
        steps = int(checkpoint.read_text().strip().removeprefix("step-")) + 2
        resumed = _grpo(tmp_path, str(config), "--resume", f"--train.steps={steps}")
        stdout, stderr = resumed.communicate(timeout=240)
        assert resumed.returncode == 0, stderr
        assert "grpo: resumed from" in stdout
        assert read_holder(run_dir / LOCK_FILE).pid == resumed.pid  # its record, kept after it
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_the_lock_is_per_run_and_released(tmp_path) -> None:
    lock = acquire_run_lock(tmp_path / "run")
    with pytest.raises(RunDirInUse, match=rf"process {os.getpid()} on "):
        acquire_run_lock(tmp_path / "run")  # another descriptor: refused, in-process too
    other = acquire_run_lock(tmp_path / "other")  # another run directory: free
    lock.release()
    acquire_run_lock(tmp_path / "run").release()
    other.release()


HOLDER_THAT_FORKS = """
import os, signal, sys, time
from pathlib import Path
from grpo.runtime.run_lock import acquire_run_lock

acquire_run_lock(Path(sys.argv[1]))
child = os.fork()
if child == 0:  # a tool worker, say: it outlives the trainer
    silent = os.open(os.devnull, os.O_WRONLY)
    os.dup2(silent, 1)  # the test reads the parent's output to its end
    os.dup2(silent, 2)
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_forked_child_keeps_no_lock_after_the_holder_is_killed(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", HOLDER_THAT_FORKS, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    child = int(result.stdout.split()[0])
    try:
        os.kill(child, 0)  # still alive
        acquire_run_lock(tmp_path / "run").release()
    finally:
        os.kill(child, signal.SIGKILL)


def _without_os_locks(monkeypatch) -> None:
    def no_flock(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_flock)


def _record(run_dir: Path, **fields) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
    holder |= {"command": "grpo train cfg.toml"} | fields
    (run_dir / LOCK_FILE).write_text(json.dumps(holder))


def test_without_os_locks_the_record_decides(tmp_path, monkeypatch) -> None:
    _without_os_locks(monkeypatch)
    run_dir = tmp_path / "run"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    _record(run_dir, pid=int(gone.stdout))  # its process has ended: replaced
    lock = acquire_run_lock(run_dir)
    assert read_holder(run_dir / LOCK_FILE).pid == os.getpid()
    with pytest.raises(RunDirInUse, match=rf"process {os.getpid()} on"):
        acquire_run_lock(run_dir)  # held by a live process of this host
    lock.release()
    assert not (run_dir / LOCK_FILE).exists()
    _record(run_dir, started=0.0)  # a live pid that started after the record: reused
    acquire_run_lock(run_dir).release()
    _record(run_dir, pid=1, host="node-7")  # another machine: cannot be checked from here
    with pytest.raises(RunDirInUse, match=r"on node-7, .*delete .*grpo\.lock"):
        acquire_run_lock(run_dir)


def test_a_rollout_worker_is_given_no_path_into_the_run_directory(
    tiny_model_dir, arithmetic_jsonl
) -> None:
    """Local worker processes and Ray actors build from a WorkerSpec: its config names no
    run directory, so what a worker produces reaches the run's files through the learner."""
    from grpo.config import load_config
    from grpo.rounds.workers.worker import WorkerSpec

    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"data.train_path='{arithmetic_jsonl}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "train.run_dir='runs/mine'",
        ],
    )
    spec = WorkerSpec(config, None, threads=1)
    assert spec.config.train.run_dir == "" and config.train.run_dir == "runs/mine"
    assert spec.config.model == config.model and spec.config.rollout == config.rollout
