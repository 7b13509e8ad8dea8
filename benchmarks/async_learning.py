"""Asynchronous rollouts at k = 1, 2 vs synchronous on the demo's arithmetic task: does
training on stale samples cost held-out accuracy, and how much sooner in wall-clock time is
sync's final accuracy reached?

    python benchmarks/async_learning.py [--steps 1500] [--eval-every 50] [--seeds 0,1,2]
        [--modes sync,k1,k2] [--out async_learning.json] [--work-dir runs/benchmark_async]

Every run is ``grpo demo``'s training (its warm-started tiny Llama, built once in the work
dir with the demo's own functions; 32 prompts × G = 8, 6 new tokens, β = 0, lr 1e-4) for
``--steps`` steps, so every mode sees the same number of samples, with ``train.seed`` =
the seed, each in its own ``python -m grpo train`` process: ``sync`` with the learner at 2
threads; ``k1``/``k2``: ``rollout.mode = "async"``, ``max_staleness`` 1 or 2, the learner at
1 thread beside 1 local worker of 1 thread (``off_policy = "auto"``: decoupled). Greedy
accuracy on the demo's dev split (200 problems) every ``--eval-every`` steps and at the end.

Reported per mode over the seeds: final accuracy, mean ± sd, and its difference from
sync's in points (target |Δ| ≤ 2); wall-clock seconds to reach sync's final mean accuracy:
per seed the first evaluation at or above it, its time the Σ time/step up to that step
(evaluations and process start-up excluded; worker start-up, inside step 1, included; a
seed that never reaches it counts its whole run), mean over seeds, and its ratio to sync's
(target ≤ 0.75). Seeds go in order, the modes alternating their order from seed to seed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from async_common import (
    ASYNC_THREADS,
    SYNC_THREADS,
    Setup,
    exit_on_sigterm,
    prepare_demo,
    run_training,
    spread,
)

# Seconds, for the estimate (quiet 2-core machine): per step (the demo's GRPO at 2 threads:
# 302 s for 1500 steps, README; async ≈ max(learn, rollout) at 1 thread each plus their
# interference, from smoke runs), per evaluation of the 200 dev problems (0.1 s measured),
# per process start-up (the workers' inside step 1).
STEP_S = {"sync": 0.20, "k1": 0.17, "k2": 0.17}
EVAL_S, START_S = 0.15, {"sync": 5.0, "k1": 10.0, "k2": 10.0}
WARM_START_S = 70.0
DELTA_TARGET, RATIO_TARGET = 2.0, 0.75


def mode_setup(mode: str) -> Setup:
    if mode == "sync":
        return Setup("sync-2t", "sync", SYNC_THREADS)
    k = int(mode.removeprefix("k"))
    return Setup(f"async-local-k{k}", "async", ASYNC_THREADS, k, "local", workers=1)


def estimate_s(args: argparse.Namespace, warm_start: bool) -> float:
    """A full run's wall-clock seconds on the quiet 2-core machine, from the constants."""
    evals = 2 + (args.steps - 1) // args.eval_every if args.eval_every else 2
    per_seed = sum(
        args.steps * STEP_S.get(m, 0.2) + evals * EVAL_S + START_S.get(m, 10.0) for m in args.modes
    )
    return len(args.seeds) * per_seed + (WARM_START_S if warm_start else 0.0)


def curve(rows: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """(step, Σ time/step up to it, held-out accuracy) at every evaluation, step 0 first."""
    points, seconds = [], 0.0
    for row in sorted(rows, key=lambda r: r.get("step", 0)):
        seconds += row.get("time/step", 0.0)
        if "eval/accuracy" in row:
            points.append((int(row["step"]), seconds, float(row["eval/accuracy"])))
    return points


def run_one(config: Path, mode: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    setup = mode_setup(mode)
    run_dir = args.work_dir / "learning" / f"{mode}-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [
        *setup.overrides(),
        f"train.steps={args.steps}",
        f"eval.every={args.eval_every}",
        f"train.seed={seed}",
    ]
    output = run_training(config, overrides, setup.threads, run_dir, args.run_timeout)
    points = curve(output.rows)
    record: dict[str, Any] = {"mode": mode, "seed": seed, "launch_s": output.wall_s}
    record["curve"] = points
    record["train_s"] = sum(row.get("time/step", 0.0) for row in output.rows)
    done = max((int(r.get("step", 0)) for r in output.rows), default=0)
    if output.returncode != 0 or done < args.steps or not points:
        last = next((line for line in reversed(output.tail) if line.strip()), "no output")
        record["failed"] = f"exit {output.returncode} after step {done}: {last}"
        record["tail"] = output.tail
    else:
        record["final_accuracy"] = points[-1][2]
    return record


def reach(record: dict[str, Any], target: float) -> tuple[float, int | None]:
    """(seconds, step) of the first evaluation at or above ``target``; (the whole run's
    seconds, None) when none is."""
    for step, seconds, accuracy in record["curve"]:
        if accuracy >= target:
            return seconds, step
    return record["train_s"], None


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in records if "final_accuracy" in r]
    modes = list(dict.fromkeys(r["mode"] for r in ok))
    if "sync" not in modes:
        return {"modes": {}, "note": "no finished sync run: nothing to compare against"}
    target = statistics.fmean(r["final_accuracy"] for r in ok if r["mode"] == "sync")
    table: dict[str, dict[str, Any]] = {}
    for mode in modes:
        runs = [r for r in ok if r["mode"] == mode]
        finals = [r["final_accuracy"] for r in runs]
        reached = [reach(r, target) for r in runs]
        table[mode] = {
            "seeds": [r["seed"] for r in runs],
            "finals": finals,
            "final_mean": statistics.fmean(finals),
            "final_sd": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "seconds_to_target": [s for s, _ in reached],
            "steps_to_target": [step for _, step in reached],
            "seconds_mean": statistics.fmean(s for s, _ in reached),
            "s_per_step": statistics.fmean(r["train_s"] / r["curve"][-1][0] for r in runs),
        }
    for row in table.values():
        row["delta_points"] = 100 * (row["final_mean"] - table["sync"]["final_mean"])
        row["time_ratio"] = row["seconds_mean"] / table["sync"]["seconds_mean"]
    return {"target_accuracy": target, "modes": table}


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"sync's final mean accuracy (the target): {summary['target_accuracy']:.1%}",
        "",
        "| mode | final accuracy, mean ± sd (%) | Δ vs sync (points) | s/step "
        "| seconds to sync's final (per seed) | mean (s) | ratio to sync | steps to it |",
        "|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for mode, row in summary["modes"].items():
        missed = [step is None for step in row["steps_to_target"]]
        seconds = ", ".join(
            f"{'>' if miss else ''}{s:.0f}"
            for s, miss in zip(row["seconds_to_target"], missed, strict=True)
        )
        steps = ", ".join("—" if s is None else str(s) for s in row["steps_to_target"])
        lines.append(
            f"| {mode} | {spread(row['finals'], 100)} | {row['delta_points']:+.1f} | "
            f"{row['s_per_step']:.3f} | {seconds} | {row['seconds_mean']:.0f} | "
            f"{row['time_ratio']:.2f} | {steps} |"
        )
    return "\n".join(lines)


def target_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for mode, row in summary["modes"].items():
        if mode == "sync":
            continue
        delta, ratio = row["delta_points"], row["time_ratio"]
        lines.append(
            f"{mode}: Δ accuracy {delta:+.1f} points (target |Δ| ≤ {DELTA_TARGET:g}: "
            f"{'met' if abs(delta) <= DELTA_TARGET else 'NOT met'}); time to sync's final "
            f"{ratio:.2f}× sync's (target ≤ {RATIO_TARGET}: "
            f"{'met' if ratio <= RATIO_TARGET else 'NOT met'})"
        )
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1500, help="the demo's 1500")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--modes", default="sync,k1,k2", help="sync and kN (N = staleness)")
    parser.add_argument("--run-timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/benchmark_async"))
    parser.add_argument("--out", type=Path, default=Path("async_learning.json"))
    args = parser.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.modes = [m for m in args.modes.split(",") if m]
    if any(m != "sync" and not (m.startswith("k") and m[1:].isdigit()) for m in args.modes):
        parser.error(f"--modes: sync or kN, not {args.modes}")
    return args


def main() -> None:
    args = parse_args()
    exit_on_sigterm()
    warm = not (args.work_dir / "demo" / "base" / "config.json").exists()
    estimate = estimate_s(args, warm)
    print(f"estimated wall time on the quiet 2-core machine: {estimate / 60:.0f} min", flush=True)
    started, records = time.perf_counter(), []
    summary: dict[str, Any] = {"modes": {}}
    config = prepare_demo(args.work_dir / "demo")
    runs = [(s, m) for i, s in enumerate(args.seeds) for m in args.modes[:: 1 - 2 * (i % 2)]]
    for done, (seed, mode) in enumerate(runs, 1):
        record = run_one(config, mode, seed, args)
        records.append(record)
        elapsed = time.perf_counter() - started
        left = elapsed / done * (len(runs) - done)
        result = record.get("failed") or f"final accuracy {record['final_accuracy']:.3f}"
        print(
            f"{mode:<5} seed {seed}: {result}, {record['train_s']:.0f} s training, "
            f"{record['launch_s']:.0f} s in all; about {left / 60:.0f} min left",
            flush=True,
        )
        summary = summarise(records)
        args.out.write_text(json.dumps({"runs": records, "summary": summary}, indent=1))
    if summary["modes"]:
        print("\n" + markdown(summary) + "\n")
        print("\n".join(target_lines(summary)))
    print(f"total {time.perf_counter() - started:.0f} s (estimated {estimate:.0f} s); {args.out}")


if __name__ == "__main__":
    main()
