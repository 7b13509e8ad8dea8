"""What ``async_throughput.py`` and ``async_learning.py`` share: the two models' files (the
demo's warm-started tiny Llama and ``trl_compare.py``'s ~58M Llama), one training run as a
clean subprocess (``python -m grpo train CONFIG --key=value ...``) whose step lines are
timestamped as they arrive, and the per-run numbers read back from its ``metrics.jsonl``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
SYNC_THREADS = 2  # the synchronous learner's torch threads (both phases, in turn)
ASYNC_THREADS = 1  # the asynchronous learner's, beside one worker of WORKER_THREADS
WORKER_THREADS = 1
STEP_LINE = re.compile(r"^step (\d+)/(\d+)")
PROMPTS_PER_STEP, GROUP_SIZE = {"demo": 32, "58m": 8}, 8  # the two models' batches

# ~58M: trl_compare.py's model and batch (8 prompts of 32 tokens × G = 8, 64 new tokens,
# β = 0.04, μ = 1, lr 1e-6, micro-batches of 16), its even_share reward (varies in every group).
CONFIG_58M = """
[model]
path = "{model}"

[data]
train_path = "{prompts}"

[rollout]
group_size = 8
max_new_tokens = 64
temperature = 1.0

[algorithm]
beta = 0.04
inner_iterations = 1
aggregation = "sequence"

[[rewards]]
function = "trl_compare_child:grpo_reward"

[optim]
lr = 1e-6

[train]
prompts_per_step = 8
sequences_per_micro_batch = 16
seed = 0
"""


@dataclass(frozen=True)
class Setup:
    """One configuration: a mode, the learner's threads and, when async, k, the backend
    and the workers (of WORKER_THREADS threads each)."""

    name: str
    mode: str  # "sync" | "async"
    threads: int  # the learner's
    k: int = 0
    backend: str = "local"
    workers: int = 0

    def overrides(self) -> list[str]:
        if self.mode == "sync":
            return ["rollout.mode=sync"]
        options = [
            "rollout.mode=async",
            f"rollout.max_staleness={self.k}",
            f"rollout.backend={self.backend}",
            f"rollout.workers={self.workers}",
            f"rollout.worker_threads={WORKER_THREADS}",
        ]
        if self.backend == "ray":  # a fresh local instance, never a cluster found running
            options.append("rollout.ray_address=local")
        return options


def prepare_demo(directory: Path, say: Callable[[str], None] = print) -> Path:
    """``grpo demo``'s files in ``directory`` (its splits, its warm-started tiny Llama, built
    once and reused, and its config); returns the config's path."""
    import torch

    from grpo.demo.run import _probe_dataset, demo_splits, warm_start, write_demo_config
    from grpo.demo.task import write_splits
    from grpo.demo.tokenizer import build_char_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    base_dir = directory / "base"
    train_rows, dev_rows, test_rows = demo_splits()
    train_path, dev_path, _ = write_splits(directory, train_rows, dev_rows, test_rows)
    if not (base_dir / "config.json").exists():
        torch.set_num_threads(1)  # as benchmarks/curriculum.py: shared cores
        torch.manual_seed(0)  # as run_demo, before its warm start
        tokenizer = build_char_tokenizer()
        warm_start(base_dir, train_rows, _probe_dataset(dev_rows, tokenizer), tokenizer, say)
    return write_demo_config(
        directory,
        base_dir=base_dir,
        train_path=train_path,
        dev_path=dev_path,
        run_dir=directory / "run",
    )


def prepare_58m(directory: Path) -> Path:
    """``trl_compare.py``'s ~58M Llama and prompts (built once) and a config for them."""
    sys.path.insert(0, str(BENCH_DIR))
    from trl_compare import build_model_dir, write_prompts

    directory.mkdir(parents=True, exist_ok=True)
    model_dir, prompts = directory / "model", directory / "prompts.jsonl"
    if not (model_dir / "config.json").exists():
        build_model_dir(model_dir, 32000, max_positions=32 + 512)
    write_prompts(prompts, 32000, 32)
    config = directory / "grpo.toml"
    config.write_text(CONFIG_58M.format(model=model_dir, prompts=prompts))
    return config


@dataclass
class RunOutput:
    returncode: int
    rows: list[dict[str, Any]]  # metrics.jsonl
    line_times: dict[int, float]  # step → perf_counter when its console line arrived
    wall_s: float
    tail: list[str] = field(default_factory=list)  # the last lines of its output


def child_env(threads: int) -> dict[str, str]:
    """The child's environment: its thread count, unbuffered output, benchmarks/ importable
    (trl_compare_child's reward, in the learner and in the workers it spawns)."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))
    return env


def run_training(
    config: Path, overrides: list[str], threads: int, run_dir: Path, timeout_s: float
) -> RunOutput:
    """``python -m grpo train config`` in its own process group (killed whole past
    ``timeout_s``), ``train.threads`` and OMP_NUM_THREADS = ``threads``."""
    command = [
        sys.executable,
        "-m",
        "grpo",
        "train",
        str(config),
        *(f"--{o}" for o in overrides),
        f"--train.threads={threads}",
        f"--train.run_dir='{run_dir}'",
        "--train.quiet=true",
        "--train.log_every=1",
        "--train.tensorboard=false",
    ]
    started = time.perf_counter()
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(threads),
        start_new_session=True,  # its workers too: one killpg ends them all
    )
    timer = threading.Timer(timeout_s, _kill_group, args=(child.pid,))
    timer.start()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    line_times: dict[int, float] = {}
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if match := STEP_LINE.match(line):
                line_times[int(match.group(1))] = time.perf_counter()
            tail.append(line.rstrip())
        child.wait()
    finally:  # Ctrl-C or SIGTERM (see exit_on_sigterm) here: nothing of the run outlives us
        timer.cancel()
        if child.poll() is None:
            _kill_group(child.pid)
    metrics = run_dir / "metrics.jsonl"
    text = metrics.read_text() if metrics.exists() else ""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return RunOutput(child.returncode, rows, line_times, time.perf_counter() - started, list(tail))


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the running child's process group is killed."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def ray_unavailable() -> str | None:
    """Why ``rollout.backend = "ray"`` cannot run here, or None: ``grpo.rounds.workers.ray_pool``
    must import in a fresh interpreter."""
    probe = subprocess.run(
        [sys.executable, "-c", "import grpo.rounds.workers.ray_pool"],
        capture_output=True,
        text=True,
        env=child_env(1),
    )
    if probe.returncode == 0:
        return None
    lines = (probe.stderr or probe.stdout).strip().splitlines()
    return f"import grpo.rounds.workers.ray_pool failed: {lines[-1] if lines else probe.returncode}"


def _total(rows: list[dict[str, Any]], *keys: str) -> float:
    return sum(row.get(key, 0.0) for row in rows for key in keys)


def summarise_run(output: RunOutput, warmup: int, workers: int) -> dict[str, float]:
    """One run's numbers over its steps after ``warmup``: rate from Σ time/step (and from
    the console lines' arrival, a check that includes logging between steps), phase times
    per step, and in async mode the learner's and the workers' idle fractions."""
    post = [r for r in output.rows if r.get("step", 0) > warmup and "time/step" in r]
    if not post:
        return {}
    n, step_s = len(post), _total(post, "time/step")
    samples, roll = _total(post, "samples/generated"), _total(post, "time/rollout", "time/reward")
    train = _total(post, "time/train")
    out = {
        "steps": float(n),
        "samples": samples,
        "samples_per_s": samples / step_s,
        "t_step": step_s / n,
        "t_roll": roll / n,  # sync: generation + rewards; async: the learner's wait
        "t_train": train / n,  # async: includes the weight sync (async/sync_s)
        "t_other": (step_s - roll - train) / n,  # selection, assembling, metrics
        "gen_frac": roll / step_s,
        "learn_frac": train / step_s,
    }
    times = output.line_times
    last = max((int(r["step"]) for r in post), default=0)
    if warmup in times and last in times and times[last] > times[warmup]:
        out["samples_per_s_wall"] = samples / (times[last] - times[warmup])
    if any("async/learner_idle_s" in r for r in post):
        worker_idle = _total(post, "async/worker_idle_s")
        out["learner_idle_frac"] = _total(post, "async/learner_idle_s") / step_s
        out["worker_idle_frac"] = worker_idle / (workers * step_s)
        out["t_worker_busy"] = (workers * step_s - worker_idle) / n  # worker-seconds per step
        out["t_sync"] = _total(post, "async/sync_s") / n
        out["sync_bytes"] = _total(post, "async/sync_bytes") / n
        out["lag_mean"] = _total(post, "async/version_lag_mean") / n
    return out


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the median over the runs that have it."""
    keys = {key for run in runs for key in run}
    return {k: statistics.median([r[k] for r in runs if k in r]) for k in sorted(keys)}


def spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """'mean ± sd' (sample sd; ± 0 for one value), values × ``scale``."""
    if not values:
        return "—"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values) * scale:.{digits}f} ± {sd * scale:.{digits}f}"
