"""A scaling model of asynchronous rollouts, checked against measured points and extended
to W = 4, 16, 64 workers.

    python benchmarks/async_scaling.py --from async_throughput.json [--workers 4,16,64]
    python benchmarks/async_scaling.py --t-learn 0.15 --t-roll 0.10 --t-sync 0.005 \
        --prompts 32 [--t-sync2 0.25] [--k 1]

Per optimizer step the learner needs L (training plus its other per-step work: selection,
assembling the rounds, metrics) and S (publishing the weights); the step's rollouts (rows
sampled and scored) take R seconds of one worker. With W workers a round's N prompts are
cut into min(W, N) chunks of whole groups, so it takes R_W = R·⌈N/W⌉/N ≈ R/W. The ratio
ρ = R/L says which side is the bottleneck (derivation: benchmarks/async_RESULTS_draft.md):

    k = 0:  τ = L + S + R_W           (each side waits for the other: sync's step)
    k ≥ 1:  τ = max(L + S, R_W)       (steady state; k + 1 rounds in flight hide the other side)
    learner utilization U_L = (L + S)/τ, worker utilization U_W = R_W/τ
    speed-up over a synchronous step τ_sync: τ_sync/τ; with ρ ≫ W or ρ ≪ 1 it tends to 1

Measured points (``--from``): L and R at 1 thread from ``sync-1t`` (the "ideal" prediction:
no interference), or, in-situ, from the asynchronous run itself (L = time/train + the other
work − S, R = the worker's busy seconds per step): their ratios are the interference of a
learner and a worker sharing the machine. The W-worker predictions assume each worker on
cores (or a GPU) of its own, so R per worker does not grow with W and the learner is not
slowed, and S as measured (weights sent once per step, loaded by each worker in parallel);
a second column, "this machine", shares ``--cores`` cores fairly between the learner's 1
thread and the workers' 1 each: past ``cores`` threads all run (1 + W)/cores slower.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Phases:
    """One configuration's per-step seconds (see the module docstring)."""

    learn: float  # L
    roll: float  # R: one worker alone
    sync: float  # S
    prompts: int  # N
    samples: float  # completions per step


@dataclass(frozen=True)
class Prediction:
    step: float
    learner_util: float
    worker_util: float


def predict(p: Phases, workers: int, k: int, cores: int = 0) -> Prediction:
    """τ and the utilizations for ``workers`` workers at staleness ``k``. ``cores`` > 0:
    all on a machine of that many cores, the learner's 1 thread and the workers' 1 each
    sharing them fairly: past ``cores`` threads every one runs (1 + W)/cores slower."""
    chunks = min(workers, p.prompts)
    roll_w = p.roll * math.ceil(p.prompts / chunks) / p.prompts
    slower = max(1.0, (1 + workers) / cores) if cores else 1.0
    learn, roll_w = p.learn * slower, roll_w * slower
    step = learn + p.sync + roll_w if k == 0 else max(learn + p.sync, roll_w)
    return Prediction(step, (learn + p.sync) / step, roll_w / step)


def phases_of(rows: dict[str, dict[str, float]], name: str, prompts: int, ideal: bool) -> Phases:
    """The phases of configuration ``name``: L and R from ``sync-1t`` when ``ideal`` (and
    measured), else from the asynchronous run itself; S from the asynchronous run."""
    row = rows[name]
    sync_s = row.get("t_sync", 0.0)
    samples = row["samples"] / row["steps"]
    if ideal and "sync-1t" in rows:
        base = rows["sync-1t"]
        return Phases(base["t_train"] + base["t_other"], base["t_roll"], sync_s, prompts, samples)
    learn = row["t_train"] + row["t_other"] - sync_s  # async time/train includes the sync
    roll = row.get("t_worker_busy", row["t_roll"])
    return Phases(learn, roll, sync_s, prompts, samples)


def prompts_of(report: dict[str, Any], model: str) -> int:
    """N of ``model``: the report's, else its completions per step over G."""
    settings = report["settings"]
    if model in settings.get("prompts_per_step", {}):
        return int(settings["prompts_per_step"][model])
    row = next(iter(report["medians"][model].values()))
    return max(1, round(row["samples"] / row["steps"] / settings.get("group_size", 8)))


def measured_points(report: dict[str, Any]) -> list[str]:
    """Predicted vs measured, for every asynchronous configuration measured."""
    lines = [
        "| model | configuration | ρ = R/L | τ measured (s) | τ ideal | τ in-situ "
        "| U_L meas / ideal / in-situ | U_W meas / ideal / in-situ | × sync-2t meas / ideal "
        "| interference L, R |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, rows in report["medians"].items():
        prompts = prompts_of(report, model)
        for name, row in rows.items():
            if "t_worker_busy" not in row:
                continue
            k, workers = int(name.rsplit("k", 1)[1]), int(row.get("workers", 1))
            ideal = phases_of(rows, name, prompts, ideal=True)
            situ = phases_of(rows, name, prompts, ideal=False)
            a, b = predict(ideal, workers, k), predict(situ, workers, k)
            u_l, u_w = 1 - row["learner_idle_frac"], 1 - row["worker_idle_frac"]
            sync2 = rows.get("sync-2t", {}).get("t_step")
            speed = f"{sync2 / row['t_step']:.2f}× / {sync2 / a.step:.2f}×" if sync2 else "—"
            lines.append(
                f"| {model} | {name} | {ideal.roll / ideal.learn:.2f} | {row['t_step']:.3f} | "
                f"{a.step:.3f} | {b.step:.3f} | {u_l:.0%} / {a.learner_util:.0%} / "
                f"{b.learner_util:.0%} | {u_w:.0%} / {a.worker_util:.0%} / {b.worker_util:.0%} | "
                f"{speed} | {situ.learn / ideal.learn:.2f}, {situ.roll / ideal.roll:.2f} |"
            )
    return lines


def scaling_table(
    label: str, p: Phases, sync2: float | None, workers: list[int], k: int, cores: int
) -> list[str]:
    """Predictions for each W: own cores per worker, and all on ``cores`` cores."""
    one = predict(p, 1, k)
    lines = [
        f"**{label}**: L = {p.learn:.3f} s, R = {p.roll:.3f} s, S = {p.sync:.4f} s, "
        f"N = {p.prompts}, ρ = {p.roll / p.learn:.2f}, k = {k}; W* = ρ(1 + S/L)^-1 = "
        f"{p.roll / (p.learn + p.sync):.2f} balances the two sides",
        "",
        "| W | τ (s) | U_L | U_W | samples/s | × async W=1 | × sync-2t "
        f"| this machine ({cores} cores): τ, U_L, U_W |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in [1, *workers]:
        own, shared = predict(p, w, k), predict(p, w, k, cores)
        vs_sync = f"{sync2 / own.step:.2f}×" if sync2 else "—"
        lines.append(
            f"| {w} | {own.step:.3f} | {own.learner_util:.0%} | {own.worker_util:.0%} | "
            f"{p.samples / own.step:.1f} | {one.step / own.step:.2f}× | {vs_sync} | "
            f"{shared.step:.3f}, {shared.learner_util:.0%}, {shared.worker_util:.0%} |"
        )
    return lines


def rho_table(workers: list[int]) -> list[str]:
    """Utilizations and speed-up over sync at equal per-phase speed, S = 0, by ρ and W."""
    head = " | ".join(f"W={w}: U_L, U_W, ×sync" for w in [1, *workers])
    lines = [f"| ρ | {head} |", "|---:|" + "---|" * (1 + len(workers))]
    for rho in (0.25, 0.5, 1.0, 2.0, 4.0, 16.0, 64.0):
        p = Phases(1.0, rho, 0.0, 10**6, 1.0)  # N large: no rounding of the chunks
        cells = []
        for w in [1, *workers]:
            pred = predict(p, w, 1)
            cells.append(
                f"{pred.learner_util:.0%}, {pred.worker_util:.0%}, {(1 + rho) / pred.step:.2f}×"
            )
        lines.append(f"| {rho:g} | " + " | ".join(cells) + " |")
    return lines


def from_report(args: argparse.Namespace) -> None:
    report = json.loads(args.from_path.read_text())
    cores = args.cores or int(report["settings"].get("cpus", 2))
    print("Measured points (τ = seconds per step; ideal: L, R from sync-1t; in-situ: from the")
    print("asynchronous run; interference = in-situ / ideal)\n")
    print("\n".join(measured_points(report)))
    for model, rows in report["medians"].items():
        async_names = [n for n in rows if "t_worker_busy" in rows[n] and n.endswith("k1")]
        if not async_names:
            continue
        name = "async-local-k1" if "async-local-k1" in async_names else async_names[0]
        ideal = "sync-1t" in rows
        phases = phases_of(rows, name, prompts_of(report, model), ideal=ideal)
        sync2 = rows.get("sync-2t", {}).get("t_step")
        source = "sync-1t's L and R" if ideal else f"{name}'s L and R (no sync-1t measured)"
        print(f"\nPredictions, {model}, from {source}, S from {name}; each worker on cores of")
        print("its own (the learner unslowed); the last column shares this machine's cores\n")
        print("\n".join(scaling_table(model, phases, sync2, args.workers, args.k, cores)))


def from_flags(args: argparse.Namespace) -> None:
    if args.t_learn is None or args.t_roll is None:
        sys.exit("give --from JSON, or at least --t-learn and --t-roll")
    phases = Phases(args.t_learn, args.t_roll, args.t_sync, args.prompts, args.samples)
    print("Predictions, each worker on cores of its own (the learner unslowed)\n")
    table = scaling_table("flags", phases, args.t_sync2, args.workers, args.k, args.cores or 2)
    print("\n".join(table))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="from_path", type=Path, help="async_throughput.py JSON")
    parser.add_argument("--workers", default="4,16,64")
    parser.add_argument("--k", type=int, default=1, help="staleness of the predictions")
    parser.add_argument("--cores", type=int, default=0, help="default: the JSON's cpus, or 2")
    parser.add_argument("--t-learn", type=float, help="L, seconds per step")
    parser.add_argument("--t-roll", type=float, help="R, one worker's seconds per step")
    parser.add_argument("--t-sync", type=float, default=0.0, help="S, seconds per step")
    parser.add_argument("--t-sync2", type=float, help="a synchronous step, for the speed-up")
    parser.add_argument("--prompts", type=int, default=32, help="N, prompts per step")
    parser.add_argument("--samples", type=float, default=256.0, help="completions per step")
    args = parser.parse_args()
    args.workers = [int(w) for w in args.workers.split(",") if w]
    return args


def main() -> None:
    args = parse_args()
    if args.from_path:
        from_report(args)
    else:
        from_flags(args)
    print("\nBy ρ (S = 0, N large, k ≥ 1; × sync = (1 + ρ)/(τ/L): sync at the same per-phase")
    print("speed, as sync-1t; sync-2t is faster by the thread speed-up of each phase)\n")
    print("\n".join(rho_table(args.workers)))


if __name__ == "__main__":
    main()
