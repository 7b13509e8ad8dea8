"""Seconds per GRPO training step with 1 vs 2 torch threads, with 0 or more extra CPU-bound
processes running: what ``grpo train`` should do when cores are contended.

    python benchmarks/threads.py --load 0 --load 1 --repeats 3

The step is the demo's (tiny Llama 128 hidden × 4 layers, untrained, 32 prompts × G = 8,
6 new tokens). For each load, that many ``while True: pass`` processes run while each
thread count trains ``--steps`` steps in a fresh process, alternately, ``--repeats``
times; the first step (warm-up) is left out and the median seconds per step is reported,
with the 1-minute load average seen at the start (other jobs on the machine count too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BUSY = "while True: pass"


def prepare(work_dir: Path) -> tuple[Path, Path]:
    """The demo's tokenizer, an untrained demo-sized model and its training prompts."""
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.run import demo_splits
    from grpo.demo.task import write_jsonl
    from grpo.demo.tokenizer import build_char_tokenizer

    model_dir = work_dir / "model"
    tokenizer = build_char_tokenizer(model_dir)
    build_tiny_llama(tokenizer, hidden_size=128, layers=4, heads=4, directory=model_dir)
    return model_dir, write_jsonl(demo_splits()[0], work_dir / "train.jsonl")


def child(threads: int, steps: int, model_dir: Path, train_path: Path, run_dir: Path) -> None:
    """Train ``steps`` demo steps with ``threads`` torch threads; print seconds per step."""
    import torch

    from grpo.config import load_config
    from grpo.training.loop import train

    torch.set_num_threads(threads)
    config = load_config(
        None,
        [
            f"model.path='{model_dir}'",
            f"data.train_path='{train_path}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "rollout.group_size=8",
            "rollout.max_new_tokens=6",
            "train.prompts_per_step=32",
            "train.sequences_per_micro_batch=256",
            f"train.steps={steps}",
            f"train.run_dir='{run_dir}'",
            "train.tensorboard=false",
            "train.completions_every=0",
        ],
    )
    history = train(config, verbose=False).history
    print(json.dumps([row["time/step"] for row in history]))


def measure(threads: int, steps: int, paths: tuple[Path, Path], run_dir: Path) -> float:
    """Median seconds per step after the first, in a fresh process (no OMP_NUM_THREADS)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(threads), "--steps", str(steps),
         "--model", str(paths[0]), "--data", str(paths[1]), "--run-dir", str(run_dir)],
        capture_output=True, text=True, env=env, check=True, timeout=1800,
    )  # fmt: skip
    return statistics.median(json.loads(done.stdout.splitlines()[-1])[1:])


def run(loads: list[int], repeats: int, steps: int, work_dir: Path) -> list[dict]:
    paths = prepare(work_dir)
    rows = []
    for load in loads:
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(load)]
        try:
            time.sleep(2 if load else 0)  # let the busy processes take their cores
            load_average = os.getloadavg()[0]
            seconds: dict[int, list[float]] = {1: [], 2: []}
            for repeat in range(repeats):
                for threads in (1, 2):
                    run_dir = work_dir / f"run-{load}-{threads}-{repeat}"
                    seconds[threads].append(measure(threads, steps, paths, run_dir))
        finally:
            for process in busy:
                process.kill()
                process.wait()
        median = {t: statistics.median(values) for t, values in seconds.items()}
        rows.append({"load": load, "load_average": load_average, "seconds": median})
        print(
            f"extra busy processes {load} (1-min load {load_average:.2f}): "
            f"1 thread {median[1]:.3f} s/step, 2 threads {median[2]:.3f} s/step, "
            f"2 threads / 1 thread = {median[2] / median[1]:.2f}×",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", type=int, action="append", help="extra busy processes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="steps per run (the first: warm-up)")
    parser.add_argument("--work-dir", default="runs/bench_threads")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, Path(args.model), Path(args.data), Path(args.run_dir))
        return
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    rows = run(args.load or [0, 1], args.repeats, args.steps, work_dir)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
