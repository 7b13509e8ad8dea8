"""Uniform sampling vs DAPO dynamic sampling vs the pooled-difficulty curriculum, at one
generation budget, on two embedded task families (``benchmarks/curriculum_tasks.py``).

Every run trains a warm-started tiny Llama with the real trainer (``grpo.training.loop``)
until the same budget of generated completions is spent, measuring held-out greedy
accuracy (≥ 1000 problems) every few steps. Reported per task and mode over the seeds,
mean and standard deviation: generated samples to reach the target accuracy (the base's
held-out accuracy + ``--gain``), the accuracy at the budget, and the fraction of samples
spent in zero-variance groups. Writes a PNG of accuracy against generated samples.

    python benchmarks/curriculum.py [--tasks arithmetic edits] [--seeds 0 1 2 3 4]
    python benchmarks/curriculum.py --merge DIR/results.json   # tabulate and plot only
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from curriculum_tasks import TASKS, Task, build_task, write_config


def mode_options(mode: str, task: Task, args: argparse.Namespace) -> list[str]:
    """The config overrides of one sampling mode."""
    if mode == "dynamic":
        return ["algorithm.dynamic_sampling=true", "algorithm.max_generation_rounds=4"]
    if mode.startswith("curriculum"):
        # "curriculum-sharp": a sharper focus, a stricter screen and no forgetting (chosen
        # after the first benchmark run showed that a 10-step half-life let one all-wrong
        # group fade before the prompt came up again, so the screen never fired).
        sharp = mode == "curriculum-sharp"
        return [
            "curriculum.enabled=true",
            f"curriculum.strength={args.sharp_strength if sharp else args.strength}",
            "curriculum.pool_by='column'",
            f"curriculum.pool_column='{task.column}'",
            f"curriculum.prescreen_threshold={args.sharp_prescreen if sharp else args.prescreen}",
            f"curriculum.exploration={args.exploration}",
            f"curriculum.half_life_steps={args.sharp_half_life if sharp else args.half_life}",
        ]
    return []


MODES = ("uniform", "dynamic", "curriculum", "curriculum-sharp")
DEFAULT_MODES = MODES[:3]


def run_mode(task: Task, paths: dict, run_dir: Path, mode: str, seed: int, args) -> list[dict]:
    """Train until the budget of generated samples is spent; returns the metrics rows."""
    from grpo.config import load_config
    from grpo.log.metrics import read_metrics
    from grpo.training.loop import train

    config_path = write_config(task, paths, run_dir)
    per_step = args.prompts_per_step * 8
    common = [
        f"train.seed={seed}",
        f"train.prompts_per_step={args.prompts_per_step}",
        f"eval.every={args.eval_every}",
        "train.progress=false",
        "train.tensorboard=false",
        *mode_options(mode, task, args),
    ]
    if mode != "dynamic":  # a fixed number of samples per step: one call
        steps = args.budget // per_step
        train(load_config(config_path, [*common, f"train.steps={steps}"]), verbose=False)
        return read_metrics(run_dir)
    # Dynamic sampling spends a varying number of samples per step: continue the run
    # (resume restores model, optimizer, sampler and RNG) until the budget is spent.
    steps = 0
    while True:
        steps += args.eval_every
        options = [*common, f"train.steps={steps}", f"train.save_every={args.eval_every}"]
        train(load_config(config_path, [*options, "train.resume=true"]), verbose=False)
        rows = read_metrics(run_dir)
        if rows[-1].get("samples/generated_total", 0) >= args.budget:
            return rows


def curve(rows: list[dict], budget: int) -> list[tuple[int, float]]:
    """(generated samples, held-out accuracy) at every evaluation within the budget."""
    points, generated = [], 0
    for row in rows:
        generated = int(row.get("samples/generated_total", generated))
        if "eval/accuracy" in row and generated <= budget:
            points.append((generated, row["eval/accuracy"]))
    return points


def summarise(rows: list[dict], budget: int) -> dict:
    counted = [row for row in rows if "samples/generated_total" in row]
    within = [row for row in counted if row["samples/generated_total"] <= budget] or counted[:1]
    points = curve(rows, budget)
    return {
        "base_accuracy": points[0][1],
        "final_accuracy": points[-1][1],
        "wasted_fraction": within[-1]["samples/wasted_frac_total"],
        "curve": points,
    }


def first_reach(points: list, target: float) -> int | None:
    return next((samples for samples, accuracy in points if accuracy >= target), None)


def spread(values: list[float]) -> str:
    """'mean ± sd' (sample standard deviation; ± 0 for one value)."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {sd:.3f}"


def table(task: str, runs_by_mode: dict[str, list[dict]], budget: int, gain: float) -> list[str]:
    """One task's markdown table and its ratios against uniform."""
    base = runs_by_mode["uniform"][0]["base_accuracy"] if "uniform" in runs_by_mode else None
    base = base if base is not None else next(iter(runs_by_mode.values()))[0]["base_accuracy"]
    budget = next(iter(runs_by_mode.values()))[0].get("budget", budget)  # the runs' own
    target = base + gain
    lines = [
        f"**{task}**: base {base:.1%}, target {target:.1%}, budget {budget} samples per run",
        "",
        "| sampling | samples to target (per seed) | mean ± sd | accuracy at budget | wasted |",
        "|---|---|---:|---:|---:|",
    ]
    means: dict[str, tuple[float, float]] = {}
    for mode, runs in runs_by_mode.items():
        reached = [first_reach(run["curve"], target) for run in runs]
        # A run that never reaches the target counts as needing the whole budget.
        counted = [float(s) if s is not None else float(budget) for s in reached]
        missed = sum(s is None for s in reached)
        note = f" ({missed} missed: counted as {budget})" if missed else ""
        per_seed = ", ".join(str(s) if s is not None else f">{budget}" for s in reached)
        wasted = [run["wasted_fraction"] for run in runs]
        sd = statistics.stdev(counted) if len(counted) > 1 else 0.0
        means[mode] = (statistics.fmean(counted), statistics.fmean(wasted))
        lines.append(
            f"| {mode} | {per_seed} | {means[mode][0]:.0f} ± {sd:.0f}{note} | "
            f"{spread([run['final_accuracy'] for run in runs])} | {spread(wasted)} |"
        )
    if "uniform" in means:
        lines.append("")
        base_samples, base_wasted = means["uniform"]
        for mode, (samples, wasted) in means.items():
            if mode != "uniform":
                lines.append(
                    f"- {mode} vs uniform: {samples / base_samples:.2f}× the samples to target, "
                    f"{wasted / max(base_wasted, 1e-9):.2f}× the wasted fraction"
                )
    return lines


def plot(results: dict, budget: int, gain: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {
        "uniform": "tab:gray",
        "dynamic": "tab:blue",
        "curriculum": "tab:red",
        "curriculum-sharp": "tab:orange",
    }
    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for axis, (task, runs_by_mode) in zip(axes[0], results.items(), strict=True):
        first = next(iter(runs_by_mode.values()))[0]
        base, task_budget = first["base_accuracy"], first.get("budget", budget)
        for mode, runs in runs_by_mode.items():
            for index, run in enumerate(runs):
                samples, accuracy = zip(*run["curve"], strict=True)
                label = mode if index == 0 else None
                axis.plot(samples, accuracy, color=colors[mode], alpha=0.6, label=label)
        axis.axhline(base + gain, color="black", linestyle=":", label=f"target (base + {gain:.0%})")
        axis.set_xlim(0, task_budget)
        axis.set_xlabel("generated samples (completions)")
        axis.set_ylabel("held-out greedy accuracy")
        axis.set_title(f"{task}: one line per seed")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def report(results: dict, budget: int, gain: float, plot_path: Path) -> None:
    for task, runs_by_mode in results.items():
        print("\n" + "\n".join(table(task, runs_by_mode, budget, gain)))
    plot(results, budget, gain, plot_path)
    print(f"\nplot: {plot_path}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES), choices=MODES)
    parser.add_argument("--budget", type=int, default=7680, help="generated samples per run")
    parser.add_argument("--gain", type=float, default=0.04, help="target = base + gain")
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--train-prompts", type=int, default=480)
    parser.add_argument("--held-out", type=int, default=1000)
    parser.add_argument("--strength", type=float, default=1.0)
    parser.add_argument("--prescreen", type=float, default=0.2)
    parser.add_argument("--exploration", type=float, default=0.1)
    parser.add_argument("--half-life", type=float, default=10.0)
    parser.add_argument("--sharp-strength", type=float, default=3.0)
    parser.add_argument("--sharp-prescreen", type=float, default=0.4)
    parser.add_argument("--sharp-half-life", type=float, default=0.0)
    parser.add_argument("--work-dir", type=Path, default=Path("runs/benchmark_curriculum"))
    parser.add_argument("--plot", type=Path, default=Path("benchmarks/curriculum.png"))
    parser.add_argument("--results", type=Path, help="default: WORK_DIR/results.json")
    parser.add_argument("--merge", type=Path, nargs="+", help="only tabulate these results")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.merge:  # runs split over several processes: one table and one plot
        merged: dict[str, dict[str, list[dict]]] = {}
        for path in args.merge:
            for task, by_mode in json.loads(path.read_text()).items():
                for mode, runs in by_mode.items():
                    merged.setdefault(task, {}).setdefault(mode, []).extend(runs)
        report(merged, args.budget, args.gain, args.plot)
        return

    import torch
    import transformers

    # One thread: on a shared machine torch's pool spins against other processes, and the
    # comparison is in samples, not seconds.
    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    started = time.perf_counter()
    results: dict[str, dict[str, list[dict]]] = {}
    results_path = args.results or args.work_dir / "results.json"
    for name in args.tasks:
        task = TASKS[name]
        paths = build_task(task, args.work_dir, args.train_prompts, args.held_out, print)
        results[name] = {mode: [] for mode in args.modes}
        for seed in args.seeds:  # modes alternate, so machine load hits them alike
            for mode in args.modes:
                run_dir = args.work_dir / name / "runs" / f"{mode}-seed{seed}"
                shutil.rmtree(run_dir, ignore_errors=True)
                run_started = time.perf_counter()
                summary = summarise(run_mode(task, paths, run_dir, mode, seed, args), args.budget)
                summary["seed"], summary["budget"] = seed, args.budget
                results[name][mode].append(summary)
                print(
                    f"{name} {mode:<11} seed {seed}: base {summary['base_accuracy']:.3f}, "
                    f"at budget {summary['final_accuracy']:.3f}, wasted "
                    f"{summary['wasted_fraction']:.3f} ({time.perf_counter() - run_started:.0f} s)",
                    flush=True,
                )
                # Written after every run, so a stopped benchmark keeps what it measured.
                results_path.write_text(json.dumps(results, indent=1))
    report(results, args.budget, args.gain, args.plot)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
