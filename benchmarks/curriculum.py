"""Uniform sampling vs DAPO dynamic sampling vs the p(1 − p) curriculum, at one generation
budget, on the embedded arithmetic task with mixed difficulties.

The demo's warm-started tiny Llama (built once, then reused) trains on a set mixing the
easy kinds (one-digit addition and multiplication, which it mostly solves: all-correct
groups) with two-digit addition and subtraction (often all-wrong). Every run gets the same
budget of generated completions; held-out greedy accuracy is measured every few steps.
Reported per mode over the seeds: generated samples needed to reach the target held-out
accuracy, the accuracy at the budget, and the fraction of samples spent in zero-variance
groups. Writes a PNG of accuracy against generated samples.

    python benchmarks/curriculum.py [--seeds 0 1 2] [--budget 12800] [--target 0.35]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from importlib import resources
from pathlib import Path

MODES = {
    "uniform": [],
    "dynamic": ["algorithm.dynamic_sampling=true", "algorithm.max_generation_rounds=4"],
    "curriculum": ["curriculum.enabled=true", "curriculum.strength=2.0"],
}


def build_task(work_dir: Path, train_prompts: int, eval_prompts: int, say) -> dict[str, Path]:
    """Warm-started base model, a mixed-difficulty training set and a held-out set."""
    from grpo.data.dataset import PromptDataset
    from grpo.demo.run import problem_kind, warm_start
    from grpo.demo.task import make_splits, write_jsonl
    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    train_rows, held_out = make_splits(4000, 500, seed=0)
    base_dir = work_dir / "base"
    if not (base_dir / "config.json").exists():  # the demo's warm start, built once
        dev_rows = held_out[:200]
        probe = PromptDataset(
            source="probe",
            prompts=[row["prompt"] for row in dev_rows],
            prompt_token_ids=[tokenizer(row["prompt"])["input_ids"] for row in dev_rows],
            columns={"answer": [row["answer"] for row in dev_rows]},
        )
        warm_start(base_dir, train_rows, probe, tokenizer, say)
    easy = [r for r in train_rows if problem_kind(r["prompt"]).endswith("1-digit")]
    hard = [r for r in train_rows if not problem_kind(r["prompt"]).endswith("1-digit")]
    mixed = easy + hard[: max(0, train_prompts - len(easy))]
    say(f"training set: {len(easy)} one-digit + {len(mixed) - len(easy)} two-digit problems")
    return {
        "base": base_dir,
        "train": write_jsonl(mixed, work_dir / "train.jsonl"),
        "eval": write_jsonl(held_out[200 : 200 + eval_prompts], work_dir / "eval.jsonl"),
    }


def run_mode(paths: dict[str, Path], run_dir: Path, mode: str, seed: int, args) -> list[dict]:
    """Train until the budget of generated samples is spent; returns the metrics rows."""
    from grpo.config import load_config
    from grpo.log.metrics import read_metrics
    from grpo.training.loop import train

    template = resources.files("grpo.demo").joinpath("default.toml").read_text()
    config_path = run_dir.parent / f"{run_dir.name}.toml"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(
        template.format(
            base_dir=paths["base"],
            train_path=paths["train"],
            test_path=paths["eval"],
            run_dir=run_dir,
        )
    )
    per_step = args.prompts_per_step * args.group_size
    common = [
        f"train.seed={seed}",
        f"train.prompts_per_step={args.prompts_per_step}",
        f"rollout.group_size={args.group_size}",
        f"eval.every={args.eval_every}",
        "train.progress=false",
        "train.tensorboard=false",
        *MODES[mode],
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


def summarise(rows: list[dict], budget: int, target: float) -> dict:
    points = curve(rows, budget)
    reached = first_reach(points, target)
    last = [row for row in rows if "samples/generated_total" in row]
    within = [row for row in last if row["samples/generated_total"] <= budget] or last[:1]
    return {
        "samples_to_target": reached,
        "final_accuracy": points[-1][1],
        "wasted_fraction": within[-1]["samples/wasted_frac_total"],
        "curve": points,
    }


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def plot(results: dict, budget: int, target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"uniform": "tab:gray", "dynamic": "tab:blue", "curriculum": "tab:red"}
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for mode, runs in results.items():
        for index, run in enumerate(runs):
            samples, accuracy = zip(*run["curve"], strict=True)
            axis.plot(
                samples,
                accuracy,
                color=colors[mode],
                alpha=0.8,
                linewidth=1.2,
                label=mode if index == 0 else None,
            )
    axis.axhline(target, color="black", linestyle=":", linewidth=1, label=f"target {target:.0%}")
    axis.set_xlim(0, budget)
    axis.set_xlabel("generated samples (completions)")
    axis.set_ylabel("held-out greedy accuracy")
    axis.set_title("Embedded arithmetic task, one line per seed")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def first_reach(points: list, target: float) -> int | None:
    return next((samples for samples, accuracy in points if accuracy >= target), None)


def report(results: dict[str, list[dict]], budget: int, target: float) -> None:
    """The markdown table: per mode over the seeds."""
    print(f"\nbudget {budget} generated samples per run; target {target:.0%}")
    print("| sampling | samples to target (per seed) | mean | accuracy at budget | wasted |")
    print("|---|---|---:|---:|---:|")
    means = {}
    for mode, runs in results.items():
        reached = [first_reach(run["curve"], target) for run in runs]
        # A run that never reaches the target counts as needing more than the budget.
        counted = [samples if samples is not None else budget for samples in reached]
        missed = sum(samples is None for samples in reached)
        note = f" ({missed} not reached: counted as the budget)" if missed else ""
        per_seed = ", ".join(str(s) if s is not None else f">{budget}" for s in reached)
        means[mode] = (mean(counted), mean([r["wasted_fraction"] for r in runs]))
        print(
            f"| {mode} | {per_seed} | {mean(counted):.0f}{note} | "
            f"{mean([r['final_accuracy'] for r in runs]):.3f} | "
            f"{mean([r['wasted_fraction'] for r in runs]):.3f} |"
        )
    if "uniform" in means:
        base_samples, base_wasted = means["uniform"]
        for mode, (samples, wasted) in means.items():
            if mode != "uniform":
                print(
                    f"{mode} vs uniform: {samples / base_samples:.2f}× the samples to target, "
                    f"{wasted / max(base_wasted, 1e-9):.2f}× the wasted fraction"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--budget", type=int, default=12800, help="generated samples per run")
    parser.add_argument("--target", type=float, default=0.35, help="held-out accuracy to reach")
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--train-prompts", type=int, default=480)
    parser.add_argument("--eval-prompts", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/benchmark_curriculum"))
    parser.add_argument("--plot", type=Path, default=Path("benchmarks/curriculum.png"))
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="only tabulate and plot these results.json files"
    )
    args = parser.parse_args()
    if args.merge:  # runs split over several processes: one table and one plot
        merged: dict[str, list[dict]] = {}
        for path in args.merge:
            for mode, runs in json.loads(path.read_text()).items():
                merged.setdefault(mode, []).extend(runs)
        report(merged, args.budget, args.target)
        plot(merged, args.budget, args.target, args.plot)
        return

    import torch
    import transformers

    # On a shared small machine torch's thread pool spins against other processes (the
    # warm start measured 10× slower with 2 threads than with 1 under load); the
    # comparison is in samples, not seconds, so one thread loses nothing.
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    started = time.perf_counter()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    paths = build_task(args.work_dir, args.train_prompts, args.eval_prompts, print)
    results: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for seed in args.seeds:  # modes alternate, so machine load hits them alike
        for mode in args.modes:
            run_dir = args.work_dir / "runs" / f"{mode}-seed{seed}"
            if run_dir.exists():
                import shutil

                shutil.rmtree(run_dir)
            run_started = time.perf_counter()
            rows = run_mode(paths, run_dir, mode, seed, args)
            summary = summarise(rows, args.budget, args.target)
            results[mode].append(summary)
            print(
                f"{mode:<11} seed {seed}: samples to {args.target:.0%}: "
                f"{summary['samples_to_target']}, accuracy at budget "
                f"{summary['final_accuracy']:.3f}, wasted {summary['wasted_fraction']:.3f} "
                f"({time.perf_counter() - run_started:.0f} s)",
                flush=True,
            )

    report(results, args.budget, args.target)
    plot(results, args.budget, args.target, args.plot)
    (args.work_dir / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\nplot: {args.plot}; total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
