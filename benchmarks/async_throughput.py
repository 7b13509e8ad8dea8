"""Asynchronous vs synchronous rollouts: samples per second, side by side on one machine.

    python benchmarks/async_throughput.py [--models demo,58m] [--backends local,ray]
        [--ks 1,2] [--steps N] [--warmup W] [--repeats 3] [--out async_throughput.json]

Configurations, each a clean ``python -m grpo train`` process (``train.threads`` and
OMP_NUM_THREADS set to the learner's threads), one after another, never two at once, in
alternating order over ``--repeats``:

- ``sync-2t``: synchronous, the learner at 2 threads (generation and training in turn);
- ``sync-1t``: synchronous at 1 thread, for the scaling model's phase times (``--no-sync1``
  leaves it out);
- ``async-<backend>-k<k>``: ``rollout.mode = "async"``, ``max_staleness`` = k, the learner
  at 1 thread beside 1 worker of 1 thread (``rollout.workers = 1``, ``worker_threads = 1``),
  on the local backend and on Ray (skipped, with the reason, when it cannot run).

Models: the demo's (its warm-started tiny Llama, 32 prompts × G = 8, 6 new tokens; no
evaluation) and ``trl_compare.py``'s ~58M Llama (8 prompts of 32 tokens × G = 8, 64 new
tokens, β = 0.04). Each run trains ``--warmup`` + ``--steps`` steps; the warm-up steps
(worker start-up included) are left out. From ``metrics.jsonl``: samples/s = Σ
samples/generated / Σ time/step over the steps after warm-up (a check from the console
lines' arrival times, which also counts the logging between steps, is kept too); the
learner's idle fraction Σ async/learner_idle_s / Σ time/step; the worker's idle fraction
Σ async/worker_idle_s / (workers · Σ time/step); for sync, the generation and learning
fractions of the step. Speed-up vs sync = the median over repeats of each repeat's rate
over that repeat's ``sync-2t`` rate. Writes every run and the medians as JSON (after each
run) and prints a markdown table and the target check. Feed the JSON to
``async_scaling.py --from``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from async_common import (
    ASYNC_THREADS,
    GROUP_SIZE,
    PROMPTS_PER_STEP,
    SYNC_THREADS,
    WORKER_THREADS,
    Setup,
    exit_on_sigterm,
    median_of,
    prepare_58m,
    prepare_demo,
    ray_unavailable,
    run_training,
    summarise_run,
)

DEFAULT_STEPS = {"demo": (60, 3), "58m": (5, 1)}  # (steps, warm-up) per model
TARGET = 1.4  # k = 1, demo, local backend: samples/s over sync-2t's
# For the estimate, quiet 2-core machine: seconds per step (demo: the README's 0.20 s at 2
# threads, smoke runs; 58m: RESULTS.md's 17.7 s at 2 threads, ×1.6 at 1 thread, async ≈
# its learner at 1 thread) and per process start-up (a Ray instance: 15 s more).
EST_STEP_S = {"demo": (0.20, 0.23, 0.17), "58m": (17.7, 28.0, 22.0)}  # sync-2t, sync-1t, async
EST_START_S = {"demo": (5.0, 10.0), "58m": (10.0, 20.0)}  # sync, async


def setups(backends: list[str], ks: list[int], sync1: bool) -> list[Setup]:
    chosen = [Setup("sync-2t", "sync", SYNC_THREADS)]
    if sync1:
        chosen.append(Setup("sync-1t", "sync", 1))
    for backend in backends:
        for k in ks:
            name = f"async-{backend}-k{k}"
            chosen.append(Setup(name, "async", ASYNC_THREADS, k, backend, workers=1))
    return chosen


def estimate_s(args: argparse.Namespace) -> float:
    """The whole benchmark's wall-clock seconds, from the constants above."""
    total = 0.0
    for model in args.models:
        steps = sum(args.steps_of[model])
        for setup in setups(args.backends, args.ks, args.sync1):
            kind = 2 if setup.mode == "async" else int(setup.threads == 1)
            start = EST_START_S[model][setup.mode == "async"] + 15.0 * (setup.backend == "ray")
            total += steps * EST_STEP_S[model][kind] + start
    return total * args.repeats + 70.0 * ("demo" in args.models)  # + the demo's warm start


def prepare(model: str, work_dir: Path) -> tuple[Path, list[str]]:
    """The model's config and its overrides for this benchmark."""
    if model == "demo":
        return prepare_demo(work_dir / "demo"), ["eval.path=''"]  # no evaluation
    return prepare_58m(work_dir / "58m"), []


def run_one(
    model: str, setup: Setup, config: Path, extra: list[str], repeat: int, args: Any
) -> dict[str, Any]:
    """One run; its summary, or why it failed."""
    steps, warmup = args.steps_of[model]
    run_dir = args.work_dir / "runs" / f"{model}-{setup.name}-r{repeat}"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [*extra, *setup.overrides(), f"train.steps={steps + warmup}"]
    output = run_training(config, overrides, setup.threads, run_dir, args.run_timeout)
    record: dict[str, Any] = {"model": model, "setup": asdict(setup), "repeat": repeat}
    record["launch_s"] = output.wall_s
    if (run_dir / "metrics.jsonl").exists():
        logs = args.work_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        shutil.copy(run_dir / "metrics.jsonl", logs / f"{run_dir.name}.jsonl")
    shutil.rmtree(run_dir, ignore_errors=True)  # the final model: 230 MB at 58M
    summary = summarise_run(output, warmup, max(setup.workers, 1))
    if output.returncode != 0 or not summary:
        last = next((line for line in reversed(output.tail) if line.strip()), "no output")
        record["failed"] = f"exit {output.returncode}: {last}"
        record["tail"] = output.tail
    record["summary"] = summary
    return record


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (model, configuration, repeat), alternating the order over repeats."""
    records: list[dict[str, Any]] = []
    ray_skip = ray_unavailable() if "ray" in args.backends else None
    if ray_skip:
        print(f"skipping the Ray backend: {ray_skip}", flush=True)
    for model in args.models:
        config, extra = prepare(model, args.work_dir)
        chosen = setups(args.backends, args.ks, args.sync1)
        for repeat in range(args.repeats):
            for setup in chosen if repeat % 2 == 0 else chosen[::-1]:
                if setup.backend == "ray" and setup.mode == "async" and ray_skip:
                    continue
                started = time.perf_counter()
                record = run_one(model, setup, config, extra, repeat, args)
                records.append(record)
                rate = record["summary"].get("samples_per_s", float("nan"))
                note = f"  FAILED {record['failed']}" if "failed" in record else ""
                print(
                    f"{model} {setup.name:<16} repeat {repeat}: {rate:8.1f} samples/s "
                    f"({time.perf_counter() - started:.0f} s){note}",
                    flush=True,
                )
                if "failed" in record and setup.backend == "ray" and setup.mode == "async":
                    ray_skip = f"a Ray run failed ({record['failed']})"
                    print(f"skipping the remaining Ray runs: {ray_skip}", flush=True)
                write_json(args, records, ray_skip)
    write_json(args, records, ray_skip)
    return records


def medians(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per model and configuration: the medians over repeats, and the speed-up vs sync-2t
    (median over repeats of the paired ratio)."""
    ok = [r for r in records if "failed" not in r and r["summary"]]
    table: dict[str, dict[str, dict[str, float]]] = {}
    for model in dict.fromkeys(r["model"] for r in ok):
        ours = [r for r in ok if r["model"] == model]
        sync = {
            r["repeat"]: r["summary"]["samples_per_s"]
            for r in ours
            if r["setup"]["name"] == "sync-2t"
        }
        for name in dict.fromkeys(r["setup"]["name"] for r in ours):
            runs = [r for r in ours if r["setup"]["name"] == name]
            row = median_of([r["summary"] for r in runs])
            ratios = [
                r["summary"]["samples_per_s"] / sync[r["repeat"]]
                for r in runs
                if r["repeat"] in sync
            ]
            if ratios:
                row["speedup"] = statistics.median(ratios)
            row["repeats"] = float(len(runs))
            row["workers"] = float(runs[0]["setup"]["workers"])
            table.setdefault(model, {})[name] = row
    return table


def _pct(row: dict[str, float], key: str) -> str:
    return f"{row[key]:.0%}" if key in row else "—"


def markdown(table: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| model | configuration | samples/s | (wall) | × sync-2t | learner idle | worker idle "
        "| generation / learning (sync) | T_roll (s) | T_learn (s) | lag |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, rows in table.items():
        for name, row in rows.items():
            sync = name.startswith("sync")
            split = f"{row['gen_frac']:.0%} / {row['learn_frac']:.0%}" if sync else "—"
            t_roll = row["t_roll"] if sync else row.get("t_worker_busy", float("nan"))
            t_learn = row["t_train"] + row["t_other"]
            speed = f"{row['speedup']:.2f}×" if "speedup" in row else "—"
            lag = f"{row['lag_mean']:.2f}" if "lag_mean" in row else "—"
            wall = row.get("samples_per_s_wall", float("nan"))
            lines.append(
                f"| {model} | {name} | {row['samples_per_s']:.1f} | {wall:.1f} | {speed} | "
                f"{_pct(row, 'learner_idle_frac')} | {_pct(row, 'worker_idle_frac')} | {split} | "
                f"{t_roll:.3f} | {t_learn:.3f} | {lag} |"
            )
    return "\n".join(lines)


def target_line(table: dict[str, dict[str, dict[str, float]]]) -> str:
    row = table.get("demo", {}).get("async-local-k1", {})
    if "speedup" not in row:
        return f"k=1 demo local: not measured (target ≥ {TARGET}×)"
    verdict = "met" if row["speedup"] >= TARGET else "NOT met"
    return f"k=1 demo local: {row['speedup']:.2f}× sync (target ≥ {TARGET}×): {verdict}"


def write_json(args: argparse.Namespace, records: list, ray_skip: str | None) -> None:
    report = {
        "settings": {
            "models": args.models,
            "backends": args.backends,
            "ks": args.ks,
            "steps_warmup": args.steps_of,
            "repeats": args.repeats,
            "sync_threads": SYNC_THREADS,
            "async_threads": ASYNC_THREADS,
            "worker_threads": WORKER_THREADS,
            "prompts_per_step": {m: PROMPTS_PER_STEP[m] for m in args.models},
            "group_size": GROUP_SIZE,
            "cpus": len(os.sched_getaffinity(0)),
            "load_at_start": args.load_at_start,
        },
        "ray_skipped": ray_skip,
        "runs": records,
        "medians": medians(records),
    }
    args.out.write_text(json.dumps(report, indent=1))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="demo,58m", help="demo,58m")
    parser.add_argument("--backends", default="local,ray", help="local,ray")
    parser.add_argument("--ks", default="1,2", help="max_staleness values")
    parser.add_argument("--steps", type=int, help="timed steps (default: demo 60, 58m 5)")
    parser.add_argument("--warmup", type=int, help="steps left out (default: demo 3, 58m 1)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-sync1", dest="sync1", action="store_false")
    parser.add_argument("--run-timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/benchmark_async"))
    parser.add_argument("--out", type=Path, default=Path("async_throughput.json"))
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    args.backends = [b for b in args.backends.split(",") if b]
    args.ks = [int(k) for k in args.ks.split(",") if k]
    unknown = set(args.models) - set(DEFAULT_STEPS) | set(args.backends) - {"local", "ray"}
    if unknown:
        parser.error(f"unknown models or backends: {sorted(unknown)}")
    args.steps_of = {
        m: (
            args.steps or DEFAULT_STEPS[m][0],
            DEFAULT_STEPS[m][1] if args.warmup is None else args.warmup,
        )
        for m in args.models
    }
    args.load_at_start = os.getloadavg()[0]
    return args


def main() -> None:
    args = parse_args()
    exit_on_sigterm()
    started = time.perf_counter()
    print(f"estimated wall time on the quiet 2-core machine: {estimate_s(args) / 60:.0f} min")
    records = measure(args)
    table = medians(records)
    print("\n" + markdown(table))
    for record in records:
        if "failed" in record:
            where = f"{record['model']} {record['setup']['name']} repeat {record['repeat']}"
            print(f"failed: {where}: {record['failed']}")
    print("\n" + target_line(table))
    print(f"total {time.perf_counter() - started:.0f} s; JSON: {args.out}")


if __name__ == "__main__":
    main()
