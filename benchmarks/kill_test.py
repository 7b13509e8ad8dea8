"""Kill test: SIGKILL `grpo train` at random moments, resume each time, compare with a clean run.

    python benchmarks/kill_test.py --seed 17       # 20 kills (10-15 minutes on a CPU)
    python benchmarks/kill_test.py --kills 3 --steps 8

A tiny random Llama trains on the arithmetic task with a checkpoint every step
(train.save_every = 1, the newest 2 kept). First one uninterrupted run; then the same
config run as `grpo train cfg --resume` again and again, each process SIGKILLed, in turn:
at a random moment of its start-up (imports, loading, restoring); at a random moment after
it has trained 1-3 new steps (mid-step or mid-write); in the middle of its 1st-3rd
checkpoint write (as soon as the staging folder appears, plus 0-10 ms). After every kill:
every `step-K` folder present must read back completely (manifest sizes, every
safetensors tensor, the trainer state via weights_only), and `latest` must name one.
Finally the run is resumed to the end and must match the uninterrupted run: the final
weights bitwise, and every log row for row: metrics.jsonl (timing fields aside),
completions.jsonl (a table every step), prompt_stats.jsonl and the TensorBoard events as
TensorBoard reads them (scalars other than timings, and the completion tables).

Exits non-zero on any failure. Prints one summary line (and writes it with --json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo.runtime.checkpoint import CHECKPOINTS, LATEST, verify_checkpoint

TIMING = ("time/", "/seconds")


def prepare(work_dir: Path, steps: int) -> Path:
    """The tiny model, the data and the config; returns the config path (run_dir unset)."""
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.task import make_splits, write_jsonl
    from grpo.demo.tokenizer import build_char_tokenizer

    model_dir = work_dir / "model"
    tokenizer = build_char_tokenizer(model_dir)
    build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=model_dir)
    rows, _ = make_splits(10, 0, seed=5)
    data = write_jsonl(rows, work_dir / "train.jsonl")
    config = work_dir / "kill_test.toml"
    config.write_text(
        f'[model]\npath = "{model_dir}"\n[data]\ntrain_path = "{data}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
        "[rollout]\ngroup_size = 4\nmax_new_tokens = 4\n"
        "[algorithm]\nbeta = 0.05\n"
        '[optim]\nlr = 3e-3\nschedule = "linear"\nwarmup_steps = 2\n'
        f"[train]\nsteps = {steps}\nprompts_per_step = 2\nsave_every = 1\n"
        "keep_checkpoints = 2\nprogress = false\ncompletions_every = 1\n"
        f"tensorboard = {'true' if _has_tensorboard() else 'false'}\n"
    )
    return config


def launch(config: Path, run_dir: Path, log: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same kernels in every process
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    command = [sys.executable, "-m", "grpo", "train", str(config), f"--train.run_dir={run_dir}"]
    with log.open("a") as handle:
        return subprocess.Popen(
            [*command, *extra], stdout=handle, stderr=subprocess.STDOUT, env=env
        )


def check_checkpoints(run_dir: Path) -> int:
    """Every step-K folder reads back and `latest` names one; the latest step (0: none)."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return 0
    steps = [verify_checkpoint(p) for p in sorted(root.iterdir()) if p.name.startswith("step-")]
    if not steps:
        return 0
    latest = root / (root / LATEST).read_text().strip()
    if not latest.is_dir():
        raise AssertionError(f"`latest` names {latest.name}, which does not exist")
    return verify_checkpoint(latest)


def staging(run_dir: Path) -> set[tuple[str, int]]:
    """(name, inode) of the half-written checkpoint folders present."""
    root = run_dir / CHECKPOINTS
    try:
        with os.scandir(root) as entries:
            return {(e.name, e.inode()) for e in entries if e.name.startswith(".tmp-step-")}
    except FileNotFoundError:
        return set()


def logged_step(run_dir: Path) -> int:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (FileNotFoundError, ValueError, KeyError):
        return 0


def kill_after_steps(process: subprocess.Popen, run_dir: Path, step: int, delay: float):
    """SIGKILL ``delay`` seconds after the process has logged step ``step``."""
    while process.poll() is None and logged_step(run_dir) < step:
        time.sleep(0.01)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)


def kill_during_write(process: subprocess.Popen, run_dir: Path, nth: int, rng: random.Random):
    """SIGKILL in the ``nth`` checkpoint write (staging folder present) of this process."""
    seen, was_staging = 0, False
    while process.poll() is None:
        writing = bool(staging(run_dir))
        if writing and not was_staging:
            seen += 1
            if seen == nth:
                time.sleep(rng.uniform(0.0, 0.01))
                process.send_signal(signal.SIGKILL)
                return
        was_staging = writing
        time.sleep(0.0005)


def _has_tensorboard() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def rows_of(run_dir: Path, name: str) -> list[dict]:
    """A JSONL log's rows, timing fields left out ([] when the file is missing)."""
    path = run_dir / name
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


def tensorboard_events(run_dir: Path) -> dict[str, list]:
    """Each tag's (step, value) events as TensorBoard's own reader shows them (the events a
    resume purged left out): every scalar other than timings, and the completion tables."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as reader

    events = reader.EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={reader.TENSORS: 0}
    )
    events.Reload()
    return {
        tag: [(event.step, event.tensor_proto.SerializeToString()) for event in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
        if not any(t in tag for t in TIMING)
    }


def compare_logs(reference: Path, killed: Path) -> dict[str, bool]:
    """Whether each log of the killed-and-resumed run equals the uninterrupted run's."""
    equal = {
        name: bool(rows_of(reference, name)) and rows_of(reference, name) == rows_of(killed, name)
        for name in ("metrics.jsonl", "completions.jsonl", "prompt_stats.jsonl")
    }
    if (reference / "tensorboard").is_dir():
        expected = tensorboard_events(reference)
        equal["tensorboard"] = bool(expected) and expected == tensorboard_events(killed)
    return equal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=0, help="default: 2 × kills + 6")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", default="runs/kill_test")
    parser.add_argument("--json", default="", help="also write the summary here")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress lines appear as they happen
    steps = args.steps or 2 * args.kills + 6
    rng = random.Random(args.seed)
    work_dir = Path(args.work_dir).resolve()
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    config = prepare(work_dir, steps)
    started = time.monotonic()

    reference, killed = work_dir / "reference", work_dir / "killed"
    clean = launch(config, reference, work_dir / "reference.log")
    first_line = None
    while clean.poll() is None:
        if first_line is None and (reference / "metrics.jsonl").exists():
            first_line = time.monotonic() - started
        time.sleep(0.05)
    if clean.returncode != 0:
        print((work_dir / "reference.log").read_text()[-3000:], file=sys.stderr)
        return 1
    reference_s = time.monotonic() - started
    first_line = first_line or reference_s
    step_s = max((reference_s - first_line) / max(steps - 1, 1), 0.05)
    print(
        f"reference: {steps} steps in {reference_s:.1f} s (first step done at {first_line:.1f} s)"
    )

    kills = torn_writes = resumes = 0
    moments = {"start-up": 0, "after 1-3 steps": 0, "mid-write": 0}
    log = work_dir / "killed.log"
    while kills < args.kills:
        before = check_checkpoints(killed)
        left_before = staging(killed)
        process = launch(config, killed, log, "--resume")
        resumes += before > 0
        moment = list(moments)[kills % 3]
        moments[moment] += 1
        logged = max(before, logged_step(killed))  # lines past the checkpoint are redone
        if moment == "start-up":  # a random moment before its first new step is logged
            deadline = time.monotonic() + rng.uniform(0.0, first_line)
            while time.monotonic() < deadline and logged_step(killed) <= logged:
                time.sleep(0.01)
            process.send_signal(signal.SIGKILL)
        elif moment == "after 1-3 steps":
            target = logged + rng.randint(1, 3)
            kill_after_steps(process, killed, target, rng.uniform(0, step_s))
        else:
            kill_during_write(process, killed, rng.randint(1, 3), rng)
        process.wait()
        if process.returncode != -signal.SIGKILL:
            print(log.read_text()[-3000:], file=sys.stderr)
            print(f"FAIL: process exited {process.returncode} before kill {kills + 1}")
            return 1
        kills += 1
        torn = bool(staging(killed) - left_before)  # this kill left a half-written checkpoint
        torn_writes += torn
        after = check_checkpoints(killed)
        print(
            f"kill {kills:2d} ({moment}{', mid-write' if torn else ''}): latest checkpoint "
            f"step {before} → {after}; every checkpoint readable"
        )
    final = launch(config, killed, log, "--resume")
    resumes += 1
    if final.wait() != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        print(f"FAIL: the final resume exited {final.returncode}")
        return 1

    from safetensors.torch import load_file

    expected = load_file(reference / "final" / "model.safetensors")
    got = load_file(killed / "final" / "model.safetensors")
    same_weights = expected.keys() == got.keys() and all(
        (expected[k] == got[k]).all().item() for k in expected
    )
    logs = compare_logs(reference, killed)
    summary = {
        "kills": kills,
        "kill_moments": moments,
        "kills_mid_checkpoint_write": torn_writes,
        "resumes": resumes,
        "steps": steps,
        "weights_bitwise_equal": same_weights,
        "metric_lines_equal": logs["metrics.jsonl"],
        "logs_equal": logs,
        "all_logs_equal": all(logs.values()),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary) + "\n")
    return 0 if same_weights and all(logs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
